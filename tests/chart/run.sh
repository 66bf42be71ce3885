#!/usr/bin/env bash
# Lint and render charts/taint-operator with the real Helm v4 engine
# (helm-python-sdk: no helm binary, no cluster) and run the chart tests.
#
#   tests/chart/run.sh [pytest args...]
#
# The venv goes to $CHART_TEST_VENV, default tests/chart/.venv (gitignored).
# promtool (for `promtool test rules` on the chart's alerts) is $PROMTOOL, else
# Debian's prometheus package unpacked into $CHART_TEST_TOOLS, default
# tests/chart/.tools (gitignored), by fetch-promtool.sh: no root, no install.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${CHART_TEST_VENV:-$here/.venv}"
python="${PYTHON:-python3}"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "chart tests need Python >= 3.10 (helm-python-sdk); got: $("$python" --version 2>&1)" >&2
    exit 1
fi

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet --upgrade -r "$here/requirements.txt"

if [ -z "${PROMTOOL:-}" ]; then
    PROMTOOL="$("$here/fetch-promtool.sh" "${CHART_TEST_TOOLS:-$here/.tools}")"
fi
export PROMTOOL

cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -q "$here" "$@"

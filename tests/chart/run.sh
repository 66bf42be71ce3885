#!/usr/bin/env bash
# Lint and render charts/taint-operator with the real Helm v4 engine
# (helm-python-sdk: no helm binary, no cluster) and run the chart tests.
#
#   tests/chart/run.sh [pytest args...]
#
# The venv (scripts/test-venv.sh) goes to $CHART_TEST_VENV, default
# tests/chart/.venv (gitignored).
# promtool (for `promtool test rules` on the chart's alerts) is $PROMTOOL, else
# Debian's prometheus package unpacked into $CHART_TEST_TOOLS, default
# tests/chart/.tools (gitignored), by fetch-promtool.sh: no root, no install.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="$("$here/../../scripts/test-venv.sh" "${CHART_TEST_VENV:-$here/.venv}" "chart tests")"

if [ -z "${PROMTOOL:-}" ]; then
    PROMTOOL="$("$here/fetch-promtool.sh" "${CHART_TEST_TOOLS:-$here/.tools}")"
fi
export PROMTOOL

cd "$here"
exec "$python" -m pytest -p no:cacheprovider -q "$here" "$@"

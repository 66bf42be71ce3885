#!/usr/bin/env bash
# The Python virtualenv of the Python test suites (tests/chart/ and e2e/real/):
# made once, then brought to tests/chart/requirements.txt (helm-python-sdk,
# pytest, PyYAML, pinned) on every run. Prints the venv's python on stdout.
#
#   python=$(scripts/test-venv.sh VENV_DIR "what it is for")
#
# The interpreter that makes the venv is $PYTHON, default python3 (>= 3.10, as
# helm-python-sdk needs).
set -euo pipefail

venv=${1:?usage: $0 VENV_DIR [WHAT]}
what=${2:-the Python tests}
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "$what need Python >= 3.10 (helm-python-sdk); got: $("$python" --version 2>&1)" >&2
    exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" >&2
fi
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet --upgrade \
    -r "$repo/tests/chart/requirements.txt" >&2
echo "$venv/bin/python"

#!/usr/bin/env bash
# taint-operator on a real one-node cluster (e2e/cluster.sh): the pytest suite in
# e2e/real/. See e2e/README.md.
#
#   e2e/real/run.sh [pytest args...]        # = just e2e-real
#
# Needs ETCD_BIN, KUBE_APISERVER_BIN, KUBE_CONTROLLER_MANAGER_BIN,
# KUBE_SCHEDULER_BIN, KUBELET_BIN and KUBE_PROXY_BIN; without them it says which
# is missing and exits 0 (skipped). Builds target/image/taint-operator.tar first
# if it is missing or older than the sources. The venv goes to
# $E2E_REAL_VENV, default e2e/real/.venv (gitignored).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${E2E_REAL_VENV:-$here/.venv}"
python="${PYTHON:-python3}"

for var in ETCD_BIN KUBE_APISERVER_BIN KUBE_CONTROLLER_MANAGER_BIN KUBE_SCHEDULER_BIN KUBELET_BIN KUBE_PROXY_BIN; do
    bin=${!var:-}
    if [[ -z $bin ]]; then
        echo "e2e-real: skipped: $var is not set (see e2e/README.md)"
        exit 0
    elif [[ ! -f $bin || ! -x $bin ]]; then
        echo "e2e-real: skipped: $var=$bin is not an executable file (see e2e/README.md)"
        exit 0
    fi
done

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "e2e-real needs Python >= 3.10 (helm-python-sdk); got: $("$python" --version 2>&1)" >&2
    exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
# the same pinned packages as the chart tests
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet --upgrade -r "$repo/tests/chart/requirements.txt"

cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -v -rs "$here" "$@"

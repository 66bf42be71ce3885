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
# $E2E_REAL_VENV, default e2e/real/.venv (gitignored), made by scripts/test-venv.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

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

# the same venv set-up and pinned packages as the chart tests
python="$("$repo/scripts/test-venv.sh" "${E2E_REAL_VENV:-$here/.venv}" "e2e-real")"

cd "$here"
exec "$python" -m pytest -p no:cacheprovider -v -rs "$here" "$@"

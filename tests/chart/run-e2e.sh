#!/usr/bin/env bash
# Install the chart into a real (bare) control plane with the Helm v4 engine
# (helm-python-sdk) and check what it created: tests/chart/test_install.py.
#
#   tests/chart/run-e2e.sh [pytest args...]
#
# Starts etcd + kube-apiserver with e2e/control-plane.sh in a temporary
# directory (stopped and removed on exit; KEEP=1 keeps it), exports
# E2E_KUBECONFIG and runs test_install.py only. Needs KUBE_APISERVER_BIN and
# ETCD_BIN (see e2e/README.md); without them it prints why and exits 0 (skip).
# With KUBE_CONTROLLER_MANAGER_BIN too, its ClusterRole aggregation runs beside
# them (the user roles' checks through view and edit need it).
# To use a cluster you already have, run instead:
#   E2E_KUBECONFIG=/path/to/kubeconfig bash tests/chart/run.sh test_install.py
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

for var in KUBE_APISERVER_BIN ETCD_BIN; do
    bin=${!var:-}
    if [[ -z $bin ]]; then
        echo "chart e2e: skipped: $var is not set (see e2e/README.md)"
        exit 0
    elif [[ ! -f $bin || ! -x $bin ]]; then
        echo "chart e2e: skipped: $var=$bin is not an executable file (see e2e/README.md)"
        exit 0
    fi
done

python="$("$repo/scripts/test-venv.sh" "${CHART_TEST_VENV:-$here/.venv}" "chart e2e")"

cp_dir="$(mktemp -d "${TMPDIR:-/tmp}/taint-operator-chart-e2e.XXXXXX")"
kcm_pid=""
stop() {
    if [[ -n $kcm_pid ]]; then kill "$kcm_pid" 2>/dev/null || true; wait "$kcm_pid" 2>/dev/null || true; fi
    "$repo/e2e/control-plane.sh" stop "$cp_dir" || true
    # start refuses to run into a directory it did not create the marker in;
    # if it failed before that, the empty temp dir is ours to remove
    if [[ ${KEEP:-0} != 1 ]]; then rmdir "$cp_dir" 2>/dev/null || true; fi
}
trap stop EXIT

rc=0
"$repo/e2e/control-plane.sh" start "$cp_dir" || rc=$?
if ((rc == 3)); then
    echo "chart e2e: skipped: the control plane binaries are unusable (see above)"
    exit 0
elif ((rc != 0)); then
    echo "chart e2e: control plane failed to start (exit $rc); logs in $cp_dir" >&2
    export KEEP=1
    exit "$rc"
fi

export E2E_KUBECONFIG="$cp_dir/admin.kubeconfig"

# The built-in view, edit and admin roles get the rules of the roles labelled
# into them from kube-controller-manager's clusterrole-aggregation controller,
# which a bare control plane lacks: with KUBE_CONTROLLER_MANAGER_BIN that one
# controller runs, or test_install.py skips the checks of the chart's user roles
# through view and edit.
if [[ -n ${KUBE_CONTROLLER_MANAGER_BIN:-} && -x $KUBE_CONTROLLER_MANAGER_BIN ]]; then
    "$KUBE_CONTROLLER_MANAGER_BIN" --kubeconfig="$E2E_KUBECONFIG" --controllers=clusterrole-aggregation \
        --leader-elect=false --secure-port=0 >"$cp_dir/kube-controller-manager.log" 2>&1 &
    kcm_pid=$!
else
    echo "chart e2e: KUBE_CONTROLLER_MANAGER_BIN is not set: no role aggregation"
fi

cd "$here"
"$python" -m pytest -p no:cacheprovider -q "$here/test_install.py" "$@"

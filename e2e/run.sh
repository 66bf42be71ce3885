#!/usr/bin/env bash
# Runs the end-to-end suite (`just e2e`). The suite itself starts one bare control
# plane with e2e/control-plane.sh, runs every scenario against it and stops it (see
# e2e/README.md); this script only checks that there is something to run against.
#
#   KUBE_APISERVER_BIN=/opt/k8s/bin/kube-apiserver ETCD_BIN=/opt/k8s/bin/etcd bash e2e/run.sh
#   E2E_KUBECONFIG=~/.kube/kind bash e2e/run.sh           # an existing cluster instead
#   E2E_ONLY=conflict,for bash e2e/run.sh                  # only scenarios whose names contain these
#   E2E_KEEP=1 bash e2e/run.sh                             # keep the control plane's directory
#
# Extra arguments go to the test binary (after `--`). Exit 3 when neither a pair of
# binaries nor a kubeconfig is given: asking for the e2e run and silently skipping
# it would look like a pass.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -z ${E2E_KUBECONFIG:-} ]]; then
  for var in KUBE_APISERVER_BIN ETCD_BIN; do
    bin=${!var:-}
    if [[ -z $bin || ! -f $bin || ! -x $bin ]]; then
      echo "e2e/run.sh: $var is not set to an executable (got '${bin}')." >&2
      echo "  Set KUBE_APISERVER_BIN and ETCD_BIN (see e2e/README.md) or E2E_KUBECONFIG." >&2
      exit 3
    fi
  done
  for tool in kubectl openssl curl; do
    command -v "$tool" >/dev/null || { echo "e2e/run.sh: '$tool' must be in PATH (see e2e/README.md)" >&2; exit 3; }
  done
fi

# The suite builds the operator too (cargo build -p taint-operator); doing it first
# keeps compiler output out of the suite's.
cargo build -p taint-operator
exec cargo test -p taint-operator-e2e --test e2e -- --nocapture "$@"

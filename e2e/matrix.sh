#!/usr/bin/env bash
# Runs the bare e2e suite (e2e/run.sh) once per set of Kubernetes binaries and
# prints one line per version (`just e2e-matrix`). Each argument is an env file
# that exports KUBE_APISERVER_BIN and ETCD_BIN (and may export the other
# binaries' variables, as /opt/k8s/<minor>/env does in e2e/README.md):
#
#   bash e2e/matrix.sh /opt/k8s/1.32/env /opt/k8s/1.33/env /opt/k8s/env
#
# E2E_MATRIX_LOGS (default: a temporary directory) keeps each run's output.
# Extra variables (E2E_ONLY, E2E_UPGRADE_APISERVER_BIN, ...) pass through to every
# run. Exit 1 when any version failed, 3 when an env file names no executable
# kube-apiserver or etcd.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

(($# > 0)) || { echo "usage: e2e/matrix.sh ENV_FILE..." >&2; exit 3; }
logs=${E2E_MATRIX_LOGS:-$(mktemp -d -t taint-operator-matrix-XXXXXX)}
mkdir -p "$logs"

# The version an env file's kube-apiserver reports, or nothing when it names none.
version_of() { # ENV_FILE
  (
    # shellcheck disable=SC1090
    . "$1"
    for var in KUBE_APISERVER_BIN ETCD_BIN; do
      [[ -x ${!var:-} ]] || exit 3
    done
    "$KUBE_APISERVER_BIN" --version 2>/dev/null | awk '{print $2}'
  )
}

lines=() failed=0
for env in "$@"; do
  version=$(version_of "$env") || { echo "e2e/matrix.sh: $env does not export an executable KUBE_APISERVER_BIN and ETCD_BIN" >&2; exit 3; }
  log=$logs/e2e-$version.log
  echo "e2e/matrix.sh: kube-apiserver $version ($env), log $log" >&2
  started=$SECONDS
  (
    # shellcheck disable=SC1090
    . "$env"
    export KUBE_APISERVER_BIN ETCD_BIN
    bash e2e/run.sh
  ) >"$log" 2>&1
  rc=$?
  took=$((SECONDS - started))
  passed=$(grep -c '^--- ok: ' "$log")
  failures=$(grep '^--- FAILED: ' "$log" | sed -E 's/^--- FAILED: ([^(]*) \(.*/\1/' | paste -sd, -)
  total=$((passed + $(grep -c '^--- FAILED: ' "$log")))
  if ((rc == 0)); then
    verdict=ok
  else
    verdict=FAILED
    failed=1
  fi
  lines+=("$(printf '%-8s %-10s %3d/%-3d scenarios  %5d s%s' "$verdict" "$version" "$passed" "$total" "$took" "${failures:+  failed: $failures}")")
  echo "${lines[-1]}" >&2
done

echo "=== e2e matrix ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
printf '%s\n' "${lines[@]}"
exit "$failed"

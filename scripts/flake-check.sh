#!/usr/bin/env bash
# Runs the whole Rust suite N times while other processes keep every core busy,
# and reports each run that failed with the tests that failed in it.
#
#   scripts/flake-check.sh [N]        # = just flake-check N (default 10)
#   HOGS_PER_CORE=3 scripts/flake-check.sh 10
#
# The suite is built once first, unloaded; then each run starts HOGS_PER_CORE
# (default 2) busy loops per core (plain shell loops, stopped at the end whatever
# happens), so the tests get a third of the machine or less. A test
# that bounds a wait by the wall clock shows up here; one that reads the injected
# clock or tokio's paused time does not. Logs: target/flake-check/run-K.log.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs=${1:-10}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "flake-check: N must be a positive integer, not '$runs'" >&2; exit 2; }
logs=target/flake-check
mkdir -p "$logs"

echo "flake-check: building the suite once (unloaded)"
cargo test --workspace --locked --no-run >"$logs/build.log" 2>&1 \
    || { tail -n 30 "$logs/build.log" >&2; echo "flake-check: the suite does not build (log: $logs/build.log)" >&2; exit 1; }

hogs=()
stop_hogs() { ((${#hogs[@]})) && kill "${hogs[@]}" 2>/dev/null || true; hogs=(); }
trap stop_hogs EXIT

cores=$(nproc)
per_core=${HOGS_PER_CORE:-2}
[[ $per_core =~ ^[1-9][0-9]*$ ]] || { echo "flake-check: HOGS_PER_CORE must be a positive integer, not '$per_core'" >&2; exit 2; }
failed=0
for k in $(seq 1 "$runs"); do
    for _ in $(seq 1 $((cores * per_core))); do
        ( while :; do :; done ) &
        hogs+=($!)
    done
    started=$SECONDS
    if cargo test --workspace --locked >"$logs/run-$k.log" 2>&1; then
        echo "run $k/$runs: passed in $((SECONDS - started)) s, $((cores * per_core)) busy loops on $cores cores"
    else
        failed=$((failed + 1))
        echo "run $k/$runs: FAILED in $((SECONDS - started)) s (log: $logs/run-$k.log)"
        grep -E '^(test .* FAILED|---- .* stdout ----)' "$logs/run-$k.log" | sed 's/^/    /' || true
    fi
    stop_hogs
done
echo "flake-check: $((runs - failed)) passed, $failed failed"
((failed == 0))

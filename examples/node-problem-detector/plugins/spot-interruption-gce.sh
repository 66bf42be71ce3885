#!/bin/sh
# node-problem-detector custom plugin: the SpotInterruption condition on Google
# Compute Engine (Spot and preemptible VMs).
#
# Exit 0: the instance is not being preempted (the condition is False). Exit 1: the
# metadata server says it is (instance/preempted is TRUE; the VM stops about 30 s
# later): True, with the reason the monitor's rule gives (PreemptionNotice). Exit 3:
# the metadata server could not tell (Unknown). stdout becomes the condition's
# message, so it stays short.
#
# The 30 s notice is why the monitor polls every 5 s: a slower poll can miss most of
# it. A maintenance event (instance/maintenance-event) is not a preemption and is
# not read.
#
# GCE_METADATA_ENDPOINT: where the metadata server is (tests point it at a stand-in;
# http://169.254.169.254 skips the name lookup). METADATA_TIMEOUT: seconds the
# request may take.

endpoint=${GCE_METADATA_ENDPOINT:-http://metadata.google.internal}
timeout=${METADATA_TIMEOUT:-2}

if ! command -v curl >/dev/null 2>&1; then
    echo "curl not found"
    exit 3
fi

# The Metadata-Flavor header is what the server requires to answer at all.
answer=$(curl -sS --max-time "$timeout" -w '\n%{http_code}' -H 'Metadata-Flavor: Google' \
    "$endpoint/computeMetadata/v1/instance/preempted")
rc=$?
if [ "$rc" != 0 ]; then
    echo "instance/preempted: no answer (curl exit $rc)"
    exit 3
fi
status=$(printf '%s\n' "$answer" | tail -n 1)
body=$(printf '%s\n' "$answer" | sed '$d' | tr -d '\r\n')
if [ "$status" != 200 ]; then
    echo "instance/preempted: HTTP $status"
    exit 3
fi
case $body in
    TRUE)
        echo "GCE is preempting this instance"
        exit 1
        ;;
    FALSE)
        echo "no preemption notice"
        exit 0
        ;;
    *)
        echo "instance/preempted: unexpected answer"
        exit 3
        ;;
esac

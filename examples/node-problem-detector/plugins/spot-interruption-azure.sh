#!/bin/sh
# node-problem-detector custom plugin: the SpotInterruption condition on Azure (Spot
# VMs and Spot scale set instances), from Scheduled Events.
#
# Exit 0: no Preempt event for this VM (the condition is False). Exit 1: Azure has
# scheduled the eviction of this VM (an event of type Preempt that lists it; at
# least 30 s ahead): True, with the reason the monitor's rule gives
# (PreemptionNotice). Exit 3: the metadata service could not tell (Unknown). stdout
# becomes the condition's message, so it stays short.
#
# Events of every VM in the same availability set or scale set placement group reach
# every member, so an event counts only when its Resources name this VM (IMDS
# compute/name). Reboot, Redeploy, Freeze and Terminate events are not preemptions.
#
# The first request after a VM starts switches Scheduled Events on and may take up
# to two minutes to answer: until then the condition is Unknown.
#
# AZURE_IMDS_ENDPOINT: where the metadata service is (tests point it at a stand-in).
# METADATA_TIMEOUT: seconds each request may take; the monitor's rule timeout must
# cover two of them.

endpoint=${AZURE_IMDS_ENDPOINT:-http://169.254.169.254}
timeout=${METADATA_TIMEOUT:-2}

if ! command -v curl >/dev/null 2>&1; then
    echo "curl not found"
    exit 3
fi

# request PATH: sets status (000 when no answer came) and body.
request() {
    answer=$(curl -sS --max-time "$timeout" -w '\n%{http_code}' -H 'Metadata: true' "$endpoint$1")
    rc=$?
    status=$(printf '%s\n' "$answer" | tail -n 1)
    body=$(printf '%s\n' "$answer" | sed '$d')
    return "$rc"
}

if ! request '/metadata/instance/compute/name?api-version=2021-02-01&format=text'; then
    echo "compute/name: no answer (curl exit $rc)"
    exit 3
fi
name=$(printf '%s' "$body" | tr -d '\r\n')
if [ "$status" != 200 ] || [ -z "$name" ]; then
    echo "compute/name: HTTP $status"
    exit 3
fi
case $name in
    *[!A-Za-z0-9._-]*)
        echo "compute/name: unexpected answer"
        exit 3
        ;;
esac

if ! request '/metadata/scheduledevents?api-version=2020-07-01'; then
    echo "scheduledevents: no answer (curl exit $rc)"
    exit 3
fi
if [ "$status" != 200 ]; then
    echo "scheduledevents: HTTP $status"
    exit 3
fi
flat=$(printf '%s' "$body" | tr -d '\r\n')
case $flat in
    *'"Events"'*) ;;
    *)
        echo "scheduledevents: unexpected answer"
        exit 3
        ;;
esac

# An event object holds no nested object, so cutting at every closing brace leaves
# one event's fields (its Resources list included) per line.
event=$(printf '%s\n' "$flat" | tr '}' '\n' |
    grep '"EventType"[[:space:]]*:[[:space:]]*"Preempt"' |
    grep -F "\"$name\"" | head -n 1)
if [ -z "$event" ]; then
    echo "no Preempt event for $name"
    exit 0
fi
not_before=$(printf '%s\n' "$event" | sed -n 's/.*"NotBefore"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
echo "Preempt scheduled, not before ${not_before:-now}"
exit 1

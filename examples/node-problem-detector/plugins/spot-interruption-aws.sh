#!/bin/sh
# node-problem-detector custom plugin: the SpotInterruption condition on AWS EC2.
#
# Exit 0: no interruption notice (the condition is False). Exit 1: EC2 has announced
# that it interrupts this spot instance (terminate, stop or hibernate, about two
# minutes ahead): True, with the reason the monitor's rule gives (PreemptionNotice).
# Exit 3: the instance metadata service could not tell (Unknown). node-problem-detector
# turns stdout into the condition's message and cuts it at max_output_length, so each
# line printed here stays short.
#
# A rebalance recommendation (meta-data/events/recommendations/rebalance) is never
# read: it says capacity is getting scarce, the instance may still run for days, and
# draining on it would empty spot nodes for nothing.
#
# IMDSv2 only, as instances launched with IMDSv1 switched off require: an API
# token first (PUT), then the notice with that token. Its answer must reach the
# caller within the instance's hop limit (1 by default), which a pod's network
# namespace adds one hop to: run node-problem-detector with hostNetwork: true, or
# raise the hop limit to 2.
#
# AWS_IMDS_ENDPOINT: where the metadata service is (tests point it at a stand-in).
# METADATA_TIMEOUT: seconds each request may take; the monitor's rule timeout must
# cover two of them.

endpoint=${AWS_IMDS_ENDPOINT:-http://169.254.169.254}
timeout=${METADATA_TIMEOUT:-2}

if ! command -v curl >/dev/null 2>&1; then
    echo "curl not found"
    exit 3
fi

# request METHOD PATH [curl options]: sets status (000 when no answer came) and body.
request() {
    method=$1
    path=$2
    shift 2
    answer=$(curl -sS -X "$method" --max-time "$timeout" -w '\n%{http_code}' "$@" "$endpoint$path")
    rc=$?
    status=$(printf '%s\n' "$answer" | tail -n 1)
    body=$(printf '%s\n' "$answer" | sed '$d')
    return "$rc"
}

if ! request PUT /latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60'; then
    echo "IMDSv2 token: no answer (curl exit $rc)"
    exit 3
fi
if [ "$status" != 200 ]; then
    echo "IMDSv2 token refused: HTTP $status"
    exit 3
fi
token=$body
case $token in
    '' | *[!A-Za-z0-9+/=_-]*)
        echo "IMDSv2 token: unexpected answer"
        exit 3
        ;;
esac

if ! request GET /latest/meta-data/spot/instance-action -H "X-aws-ec2-metadata-token: $token"; then
    echo "spot/instance-action: no answer (curl exit $rc)"
    exit 3
fi
case $status in
    404)
        echo "no spot interruption notice"
        exit 0
        ;;
    200) ;;
    *)
        echo "spot/instance-action: HTTP $status"
        exit 3
        ;;
esac

# {"action": "terminate", "time": "2026-11-20T12:02:00Z"}, on one line or several.
flat=$(printf '%s' "$body" | tr -d '\r\n')
action=$(printf '%s\n' "$flat" | sed -n 's/.*"action"[[:space:]]*:[[:space:]]*"\([a-z]*\)".*/\1/p')
when=$(printf '%s\n' "$flat" | sed -n 's/.*"time"[[:space:]]*:[[:space:]]*"\([0-9T:.Z+-]*\)".*/\1/p')
case $action in
    terminate | stop | hibernate)
        echo "spot interruption notice: $action at ${when:-an unknown time}"
        exit 1
        ;;
    *)
        echo "spot/instance-action: unexpected answer"
        exit 3
        ;;
esac

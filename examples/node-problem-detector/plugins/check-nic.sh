#!/bin/sh
# node-problem-detector custom plugin: the NetworkInterfaceCard condition.
#
# Checks the interfaces named as arguments, or, with none, every interface backed by
# a device (a NIC, a virtio or ENA adapter; not a bridge, veth or tunnel). An
# interface is up when the kernel says so (operstate "up"; for a driver that reports
# "unknown", when it has a carrier).
#
# Exit 0: every one is up (the condition is False). Exit 1: one is down, or a named
# one has gone (True, with the reason the monitor's rule gives: NICDown). Exit 3:
# there is nothing to check (Unknown): inside a pod's own network namespace no
# interface has a device, so node-problem-detector needs hostNetwork: true.
# stdout becomes the condition's message, so it stays short.
#
# node-problem-detector can only write the statuses True, False and Unknown; a
# condition status of its own, such as Kaput, has to come from another reporter.
#
# SYSFS_NET: the interface directory (tests point it at a made-up tree).

sysfs=${SYSFS_NET:-/sys/class/net}

if [ "$#" -eq 0 ]; then
    for dir in "$sysfs"/*; do
        if [ -e "$dir/device" ]; then
            set -- "$@" "${dir##*/}"
        fi
    done
    if [ "$#" -eq 0 ]; then
        echo "no network interface with a device in $sysfs"
        exit 3
    fi
fi

up=""
down=""
for nic in "$@"; do
    if [ ! -d "$sysfs/$nic" ]; then
        down="$down $nic(gone)"
        continue
    fi
    state=$(cat "$sysfs/$nic/operstate" 2>/dev/null)
    if [ "$state" = unknown ] && [ "$(cat "$sysfs/$nic/carrier" 2>/dev/null)" = 1 ]; then
        state=up
    fi
    if [ "$state" = up ]; then
        up="$up $nic"
    else
        down="$down $nic(${state:-unreadable})"
    fi
done

if [ -n "$down" ]; then
    echo "down:$down"
    exit 1
fi
echo "up:$up"
exit 0

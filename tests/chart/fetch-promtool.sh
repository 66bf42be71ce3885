#!/usr/bin/env bash
# Puts promtool (from Debian's `prometheus` package) at DIR/prometheus/usr/bin/promtool
# and prints its path. The package is downloaded and unpacked, never installed: no
# root needed, nothing changes outside DIR, and no prometheus service is started.
#
#   tests/chart/fetch-promtool.sh DIR
#
# When this machine has no package lists (a fresh container), they are fetched into
# DIR/apt instead of /var/lib/apt/lists, so that works without root too.
set -euo pipefail

dir="${1:?usage: fetch-promtool.sh DIR}"
promtool="$dir/prometheus/usr/bin/promtool"

if [ -x "$promtool" ] && "$promtool" --version >/dev/null 2>&1; then
    echo "$promtool"
    exit 0
fi
for tool in apt-get dpkg-deb; do
    if ! command -v "$tool" >/dev/null; then
        echo "fetching promtool needs Debian's $tool; or set PROMTOOL to a promtool binary" >&2
        exit 1
    fi
done

mkdir -p "$dir"
work="$(mktemp -d "$dir/fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# apt drops privileges to _apt for downloads, which cannot write into DIR: download
# as whoever runs this (the warning says so, and is all it does).
as_me=(-o "APT::Sandbox::User=$(id -un)")
download() {
    (cd "$work" && apt-get -q "${as_me[@]}" "$@" download prometheus)
}
if ! download >"$work/download.log" 2>&1; then
    apt_dir="$dir/apt"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    private=(-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache")
    echo "no prometheus package in this machine's package lists; fetching them into $apt_dir" >&2
    apt-get -q "${as_me[@]}" "${private[@]}" update >&2
    download "${private[@]}" >&2
fi

dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
rm -rf "$dir/prometheus"
mv "$work/root" "$dir/prometheus"
"$promtool" --version >/dev/null
echo "$promtool"

#!/usr/bin/env bash
# Builds the taint-operator image with buildah (no daemon, no registry) and writes
# it as a docker-archive tagged with the chart's default image reference:
#
#   scripts/build-image.sh            # = just image
#
# Output: target/image/taint-operator.tar, loadable with `docker load`,
# `podman load`, `ctr images import`, `kind load image-archive`,
# `k3s ctr images import`, `minikube image load`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v buildah >/dev/null || { echo "build-image.sh: buildah is not installed (Debian: apt-get install buildah)" >&2; exit 3; }

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/taint-operator/Chart.yaml)
repository=$(sed -n '/^image:/,/^[^ ]/s/^  repository: *\(.*\)$/\1/p' charts/taint-operator/values.yaml)
[[ -n $version && -n $repository ]] || { echo "build-image.sh: cannot read appVersion or image.repository from the chart" >&2; exit 1; }
ref="$repository:$version"
target=x86_64-unknown-linux-gnu
# CARGO_TARGET_DIR moves cargo's output; the image files stay under target/.
binary=${CARGO_TARGET_DIR:-target}/$target/release/taint-operator

RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --target "$target" -p taint-operator
# The image has no libraries: the ELF must have no program interpreter.
if readelf -l "$binary" | grep -q 'Requesting program interpreter'; then
    echo "build-image.sh: $binary is dynamically linked; the image has no libraries for it" >&2
    exit 1
fi

# The image's files: the binary and its kubectl plugin name.
root=target/image-root/usr/local/bin
rm -rf target/image-root
mkdir -p "$root"
cp "$binary" "$root/taint-operator"
ln -s taint-operator "$root/kubectl-taintpolicy"

# vfs and chroot isolation: no overlay mounts or user namespaces needed.
store=(--storage-driver vfs)
buildah "${store[@]}" bud --isolation chroot --layers=false -f Dockerfile -t "$ref" .
mkdir -p target/image
rm -f target/image/taint-operator.tar
buildah "${store[@]}" push "$ref" "docker-archive:target/image/taint-operator.tar:$ref"
echo "image $ref: target/image/taint-operator.tar ($(du -h target/image/taint-operator.tar | cut -f1)); binary $(du -h "$binary" | cut -f1)"

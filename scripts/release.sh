#!/usr/bin/env bash
# A release's artifacts in one folder, and with REGISTRY the image and the chart
# pushed to an OCI registry:
#
#   scripts/release.sh                      # = just release
#   REGISTRY=registry.example.com:5000 scripts/release.sh
#
# Writes $DIST (default dist/VERSION, VERSION the chart's appVersion):
#   taint-operator-VERSION.tgz             the chart (with REGISTRY: pinned to the
#                                          pushed image, repository@digest)
#   taint-operator-VERSION.docker.tar      the image, docker-archive
#   taint-operator-VERSION.oci.tar         the image, OCI layout (oci-archive)
#   taint-operator-VERSION.cdx.json        the image's SBOM (CycloneDX 1.6 JSON)
#   SHA256SUMS                             of all of the above (sha256sum -c)
#   release.json                           what was pushed where (with REGISTRY)
#
# With REGISTRY=host[:port][/path] the image goes to REGISTRY/taint-operator:VERSION
# and the chart to oci://REGISTRY/charts/taint-operator:VERSION, so that
#   helm install taint-operator oci://REGISTRY/charts/taint-operator --version VERSION
# runs exactly the pushed image. The registry is spoken to over plain HTTP when
# REGISTRY_PLAIN_HTTP=1, which is the default for a loopback host (127.0.0.1,
# localhost, [::1]) and off otherwise. Credentials are the ones buildah and Helm
# already hold (`buildah login`, Helm's registry config).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

chart_dir=charts/taint-operator
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart_dir/Chart.yaml")
chart_version=$(sed -n 's/^version: *\(.*\)$/\1/p' "$chart_dir/Chart.yaml")
repository=$(sed -n '/^image:/,/^[^ ]/s/^  repository: *\(.*\)$/\1/p' "$chart_dir/values.yaml")
[[ -n $version && -n $chart_version && -n $repository ]] \
    || { echo "release: cannot read appVersion, version or image.repository from the chart" >&2; exit 1; }
[[ $version == "$chart_version" ]] \
    || { echo "release: the chart's version ($chart_version) and appVersion ($version) differ; a release ships both as one" >&2; exit 1; }
ref="$repository:$version"
dist=${DIST:-dist/$version}
registry=${REGISTRY:-}
registry=${registry#oci://}
registry=${registry%/}
case "${registry%%/*}" in
    127.0.0.1 | 127.0.0.1:* | localhost | localhost:* | "[::1]" | "[::1]:"*) plain_default=1 ;;
    *) plain_default=0 ;;
esac
plain_http=${REGISTRY_PLAIN_HTTP:-$plain_default}

# The image and its SBOM (checked by scripts/check-image.py).
bash scripts/build-image.sh

rm -rf "$dist"
mkdir -p "$dist"
store=(--storage-driver vfs)
name=taint-operator-$version
cp target/image/taint-operator.tar "$dist/$name.docker.tar"
cp target/image/taint-operator.cdx.json "$dist/$name.cdx.json"
buildah "${store[@]}" push --quiet "$ref" "oci-archive:$dist/$name.oci.tar:$ref"

# the chart tests' venv: the same pinned helm-python-sdk
python="$(scripts/test-venv.sh "${RELEASE_VENV:-$repo/tests/chart/.venv}" "release")"
chart_args=(--chart "$chart_dir" --dest "$dist")
if [[ -n $registry ]]; then
    image="$registry/taint-operator"
    tls=(--tls-verify=true)
    [[ $plain_http == 1 ]] && tls=(--tls-verify=false)
    buildah "${store[@]}" push --quiet "${tls[@]}" --digestfile "$dist/.digest" "$ref" "docker://$image:$version"
    digest=$(cat "$dist/.digest")
    rm -f "$dist/.digest"
    chart_args+=(--image-repository "$image" --image-digest "$digest"
        --push "oci://$registry/charts" --image-ref "$image:$version")
    [[ $plain_http == 1 ]] && chart_args+=(--plain-http)
fi
"$python" scripts/release_chart.py "${chart_args[@]}"

(cd "$dist" && sha256sum -- *.tgz *.tar *.cdx.json >SHA256SUMS && sha256sum --quiet -c SHA256SUMS)
echo "release $version: $dist"
ls -l "$dist" | sed 1d

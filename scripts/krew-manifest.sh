#!/usr/bin/env bash
# Packages the static linux/amd64 binary as the kubectl plugin `taintpolicy` and
# writes its krew manifest, with the archive's real sha256:
#
#   scripts/krew-manifest.sh BASE_URL
#
# BASE_URL is where the archive will be published (a release's download folder).
# Output: target/plugin/kubectl-taintpolicy_linux_amd64.tar.gz and
# target/plugin/taintpolicy.yaml. Test it with
#   kubectl krew install --manifest=target/plugin/taintpolicy.yaml \
#     --archive=target/plugin/kubectl-taintpolicy_linux_amd64.tar.gz
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

base_url=${1:?usage: scripts/krew-manifest.sh BASE_URL (where the archive will be downloaded from)}
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/taint-operator/Chart.yaml)
[[ -n $version ]] || { echo "krew-manifest.sh: cannot read appVersion from the chart" >&2; exit 1; }
target=x86_64-unknown-linux-gnu
binary=target/$target/release/taint-operator

# The same static build as the image: it runs on any linux/amd64 machine.
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --target "$target" -p taint-operator

out=target/plugin
stage=$out/stage
rm -rf "$out"
mkdir -p "$stage"
cp "$binary" "$stage/kubectl-taintpolicy"
archive=kubectl-taintpolicy_linux_amd64.tar.gz
# Fixed owner and times, so the same binary gives the same archive and sha256.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -C "$stage" -czf "$out/$archive" kubectl-taintpolicy
sha=$(sha256sum "$out/$archive" | cut -d' ' -f1)

cat > "$out/taintpolicy.yaml" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: taintpolicy
spec:
  version: v$version
  homepage: https://github.com/taint-operator/taint-operator
  shortDescription: Explain node taints and plan TaintPolicy changes
  description: |
    kubectl taintpolicy explain NODE says why a node carries the taints it does:
    which TaintPolicy owns each, which condition or critical pod holds it, when a
    for window ends, conflicts and the maxTaintedNodes cap, and what the operator
    does next. kubectl taintpolicy plan --live -f POLICY.yaml shows what a policy
    change would do to the cluster before it is applied. Read-only.
  platforms:
  - selector:
      matchLabels:
        os: linux
        arch: amd64
    uri: ${base_url%/}/$archive
    sha256: $sha
    bin: kubectl-taintpolicy
    files:
    - from: kubectl-taintpolicy
      to: .
YAML
echo "plugin archive $out/$archive (sha256 $sha); manifest $out/taintpolicy.yaml"

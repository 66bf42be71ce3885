# taint-operator tasks. `just --list` shows them.

examples := "-f examples/spot-out-of-service.yaml -f examples/nic-kaput.yaml -f examples/startup-init-daemonset.yaml -f examples/istio-cni-readiness.yaml -f examples/cni-network-ready.yaml"

# Plan the shipped examples against the example cluster dump (no cluster needed).
plan *ARGS:
    cargo run -q -p taint-operator -- plan {{examples}} --cluster examples/cluster.yaml --now 2026-11-20T12:00:00Z {{ARGS}}

# Every test: unit, property, mocked-API, e2e (skipped without a control plane), chart.
test:
    cargo test --workspace && bash tests/chart/run.sh

# The whole Rust suite N times with every core kept busy; reports the failures (scripts/flake-check.sh).
flake-check N="10":
    bash scripts/flake-check.sh {{N}}

# Regenerate the chart's copy of the CRD.
crd:
    cargo run -q -p taint-operator -- crd > charts/taint-operator/files/taintpolicies.nodetaint.io.yaml

# Start a bare control plane (needs KUBE_APISERVER_BIN and ETCD_BIN) and run the e2e tests against it.
e2e:
    bash e2e/run.sh

# The container image (buildah, no daemon): target/image/taint-operator.tar, tagged as the chart's default image.
image:
    bash scripts/build-image.sh

# A release in dist/VERSION: chart, image (docker-archive, OCI layout), SBOM, SHA256SUMS; with REGISTRY=host:port also pushed, the chart pinned to the image's digest.
release:
    bash scripts/release.sh

# Decision-core benchmarks (criterion).
bench:
    cargo bench -p taint-operator-engine --bench evaluate

# The supply-chain check CI runs: cargo deny (advisories offline from ../shared/advisory-db, bans, licenses, sources).
deny *CHECKS:
    bash scripts/cargo-deny.sh {{CHECKS}}

# What CI runs.
ci:
    bash .ci/run

# Install the chart into a fresh bare control plane and check what it creates (needs KUBE_APISERVER_BIN and ETCD_BIN).
chart-e2e:
    bash tests/chart/run-e2e.sh

# The bare e2e suite once per set of Kubernetes binaries, one line per version: `just e2e-matrix /opt/k8s/1.32/env /opt/k8s/env` (each file exports KUBE_APISERVER_BIN and ETCD_BIN; see e2e/README.md).
e2e-matrix +envs:
    bash e2e/matrix.sh {{envs}}

# kube-apiserver upgraded one minor version under the running operator: `just e2e-upgrade /opt/k8s/1.35/env /opt/k8s/bin/kube-apiserver`.
e2e-upgrade env newer:
    bash -c '. "{{env}}"; export KUBE_APISERVER_BIN ETCD_BIN; E2E_ONLY="kube-apiserver upgrade" E2E_UPGRADE_APISERVER_BIN="{{newer}}" bash e2e/run.sh'

# The multi-node suite (e2e/real/test_multinode.py, and test_detectors.py with NPD_BIN) on 4 kubelets in zones a and b: drains, a zone hold, out-of-service, the leader's node powered off, node-problem-detector's conditions.
e2e-multinode:
    E2E_NODES=4 E2E_ZONES=a,b bash e2e/real/run.sh

# Start a real one-node cluster (e2e/cluster.sh; needs the six Kubernetes binaries, see e2e/README.md), install the chart and run e2e/real/.
e2e-real:
    bash e2e/real/run.sh

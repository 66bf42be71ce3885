"""A real Prometheus (Debian's `prometheus`) watching the operator as prometheus-operator would.

There is no prometheus-operator in the test cluster, so this module does its job for
the chart's two objects, rendered from the installed chart with the release's values:

* the ServiceMonitor becomes a scrape job the way prometheus-operator writes one:
  Kubernetes service discovery of the endpoints of the Services its selector picks
  in its namespaces, the endpoint's port, path, scheme, interval, bearer token and
  TLS settings, and the labels prometheus-operator sets (job from `jobLabel`,
  namespace, service, pod, container, endpoint);
* the PrometheusRule's groups become the rule file, as they are except for each
  alert's `for`, cut to FOR so that an alert fires within the test (the chart's
  windows are 5 to 15 minutes).

Prometheus runs on the host, beside the cluster, and the pod IPs are reachable
from the host. Debian builds Prometheus without Kubernetes service discovery, so
`Discovery` plays its part: every second it reads the Services and EndpointSlices
of the monitored namespaces and hands each endpoint to Prometheus through file_sd,
with the `__meta_kubernetes_*` labels the endpoints role would set; the scrape
job's relabeling, written as prometheus-operator writes it, does the rest. The
bearer token the ServiceMonitor names by its in-cluster path is a ServiceAccount
token the test makes.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

import k8s

BINARY = "prometheus"
FOR = "10s"
SCRAPE_INTERVAL = "2s"


def missing() -> str | None:
    if shutil.which(BINARY) is None:
        return "prometheus is not installed (Debian package prometheus)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def label_name(name: str) -> str:
    """A Kubernetes label name as Prometheus service discovery spells it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def scrape_config(monitor: dict[str, Any], targets_file: Path, token_file: Path | None) -> list[dict[str, Any]]:
    """The scrape jobs prometheus-operator would generate for this ServiceMonitor."""
    spec = monitor["spec"]
    meta = monitor["metadata"]
    keep = [
        {
            "source_labels": [f"__meta_kubernetes_service_label_{label_name(k)}"],
            "regex": re.escape(v),
            "action": "keep",
        }
        for k, v in sorted(spec["selector"].get("matchLabels", {}).items())
    ]
    jobs = []
    for index, endpoint in enumerate(spec["endpoints"]):
        relabel = [
            *keep,
            {"source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": re.escape(endpoint["port"]), "action": "keep"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"target_label": "job", "replacement": "${1}", "source_labels": ["__meta_kubernetes_service_name"]},
            {"target_label": "endpoint", "replacement": endpoint["port"]},
        ]
        if "jobLabel" in spec:
            relabel.append(
                {
                    "source_labels": [f"__meta_kubernetes_service_label_{label_name(spec['jobLabel'])}"],
                    "target_label": "job",
                    "regex": "(.+)",
                    "replacement": "${1}",
                }
            )
        relabel.extend(endpoint.get("relabelings", []))
        job: dict[str, Any] = {
            "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{index}",
            # what `kubernetes_sd_configs: [{role: endpoints, namespaces: ...}]` finds
            "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
            "scheme": endpoint.get("scheme", "http"),
            "metrics_path": endpoint.get("path", "/metrics"),
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": "1s",
            "relabel_configs": relabel,
        }
        if endpoint.get("bearerTokenFile"):
            if token_file is None:
                raise ValueError("the ServiceMonitor scrapes with a bearer token, and no token file was given")
            job["authorization"] = {"credentials_file": str(token_file)}
        tls = endpoint.get("tlsConfig")
        if tls:
            job["tls_config"] = {"insecure_skip_verify": bool(tls.get("insecureSkipVerify"))}
        if endpoint.get("metricRelabelings"):
            job["metric_relabel_configs"] = endpoint["metricRelabelings"]
        jobs.append(job)
    return jobs


def monitored_namespaces(monitor: dict[str, Any]) -> list[str]:
    return monitor["spec"].get("namespaceSelector", {}).get("matchNames") or [monitor["metadata"]["namespace"]]


def endpoint_targets(namespace: str, services: list[dict], slices: list[dict], pods: list[dict]) -> list[dict[str, Any]]:
    """file_sd target groups for every endpoint and port of these Services, labelled
    as Kubernetes service discovery (role endpoints) labels them."""
    by_pod = {p["metadata"]["name"]: p for p in pods}
    groups = []
    for svc in services:
        name = svc["metadata"]["name"]
        svc_labels = {
            f"__meta_kubernetes_service_label_{label_name(k)}": v
            for k, v in (svc["metadata"].get("labels") or {}).items()
        }
        for es in slices:
            if (es["metadata"].get("labels") or {}).get("kubernetes.io/service-name") != name:
                continue
            for endpoint in es.get("endpoints") or []:
                ref = endpoint.get("targetRef") or {}
                pod = by_pod.get(ref.get("name", "")) if ref.get("kind") == "Pod" else None
                for port in es.get("ports") or []:
                    container = ""
                    for c in (pod or {}).get("spec", {}).get("containers", []):
                        if any(cp.get("containerPort") == port["port"] for cp in c.get("ports", [])):
                            container = c["name"]
                    labels = {
                        "__meta_kubernetes_namespace": namespace,
                        "__meta_kubernetes_service_name": name,
                        "__meta_kubernetes_endpoint_port_name": port.get("name", ""),
                        "__meta_kubernetes_endpoint_ready": str(bool(endpoint.get("conditions", {}).get("ready"))).lower(),
                        "__meta_kubernetes_pod_name": ref.get("name", "") if pod else "",
                        "__meta_kubernetes_pod_container_name": container,
                        **svc_labels,
                    }
                    for address in endpoint.get("addresses") or []:
                        groups.append({"targets": [f"{address}:{port['port']}"], "labels": labels})
    return sorted(groups, key=lambda g: (g["targets"], sorted(g["labels"].items())))


class Discovery:
    """Keeps a file_sd file in step with the Services' endpoints (every second)."""

    def __init__(self, path: Path):
        self.path = path
        self.namespaces: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.written = ""
        self.path.write_text("[]")

    def refresh(self) -> None:
        groups = []
        for ns in self.namespaces:
            listed = {
                kind: k8s.items(kind, "-n", ns)
                for kind in ("services", "endpointslices.discovery.k8s.io", "pods")
            }
            groups += endpoint_targets(ns, *listed.values())
        text = json.dumps(groups, indent=1)
        if text != self.written:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.rename(self.path)
            self.written = text

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.refresh()
            except AssertionError:  # a kubectl hiccup: next round
                pass
            self.stop.wait(1)


def rule_file(rule: dict[str, Any]) -> dict[str, Any]:
    """The PrometheusRule's groups, each alert's `for` cut to FOR."""
    groups = json.loads(json.dumps(rule["spec"]["groups"]))
    for group in groups:
        for r in group["rules"]:
            if "for" in r:
                r["for"] = FOR
    return {"groups": groups}


class Prometheus:
    def __init__(self, directory: Path):
        self.dir = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.dir.mkdir(parents=True, exist_ok=True)
        self.token_file = self.dir / "token"
        self.discovery = Discovery(self.dir / "targets.json")

    def configure(self, monitor: dict[str, Any], rule: dict[str, Any], token: str | None = None) -> None:
        """Writes the config and rule files for these objects; reloads a running Prometheus."""
        if token is not None:
            self.token_file.write_text(token)
            self.token_file.chmod(0o600)
        rules = self.dir / "rules.yaml"
        rules.write_text(yaml.safe_dump(rule_file(rule)))
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": "2s"},
            "rule_files": [str(rules)],
            "scrape_configs": scrape_config(
                monitor, self.discovery.path, self.token_file if token is not None else None
            ),
        }
        self.discovery.namespaces = monitored_namespaces(monitor)
        self.discovery.refresh()
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        if self.process is not None:
            self.post("/-/reload")
            config_ok = self.get("/api/v1/status/config")["data"]["yaml"]
            assert str(rules) in config_ok

    def start(self) -> None:
        self.discovery.thread.start()
        log = open(self.dir / "prometheus.log", "ab")
        self.process = subprocess.Popen(
            [
                BINARY,
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.process.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"prometheus not ready after 60 s: {self.log_tail()}")

    def stop(self) -> None:
        self.discovery.stop.set()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def log_tail(self, lines: int = 20) -> str:
        path = self.dir / "prometheus.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def get(self, path: str, **params: str) -> dict[str, Any]:
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def post(self, path: str) -> None:
        with urllib.request.urlopen(urllib.request.Request(self.url + path, method="POST"), timeout=10) as r:
            assert r.status == 200, f"POST {path}: {r.status}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's series (vector result)."""
        answer = self.get("/api/v1/query", query=expr)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def targets(self) -> list[dict[str, Any]]:
        return self.get("/api/v1/targets", state="active")["data"]["activeTargets"]

    def firing(self, alert: str) -> list[dict[str, Any]]:
        return [
            a for a in self.get("/api/v1/alerts")["data"]["alerts"]
            if a["labels"].get("alertname") == alert and a["state"] == "firing"
        ]

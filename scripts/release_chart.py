#!/usr/bin/env python3
"""The chart half of `just release` (scripts/release.sh runs it in the chart tests' venv).

    release_chart.py --chart DIR --dest DIR
        [--image-repository REPO --image-digest sha256:... --image-ref REF]
        [--push oci://HOST/PATH [--plain-http]]

Packages the chart into DEST with the real Helm engine (helm-python-sdk). With an
image repository and digest, the packaged chart's values point at exactly that
image (image.repository, image.digest; the tag stays the appVersion), edited in
place so that the comments of values.yaml survive; the chart must then still lint
clean with --strict. With --push the archive goes to the OCI registry and
DEST/release.json records the chart reference, its digest and the image's.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import helm_python as helm
from helm_python import registry

# The chart's kubeVersion floor is 1.32; lint against the API it is tested on.
LINT_KUBE_VERSION = "v1.36.0"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class ReleaseError(Exception):
    pass


def pin_image(values: str, repository: str, digest: str) -> str:
    """values.yaml with image.repository and image.digest set, all else untouched."""
    if not DIGEST.match(digest):
        raise ReleaseError(f"--image-digest: {digest!r} is not sha256:<64 hex digits>")
    block = re.search(r"^image:\n((?:[ \t]+.*\n|[ \t]*#.*\n|\n)*)", values, re.MULTILINE)
    if not block:
        raise ReleaseError("values.yaml: no top-level image: block")
    body = block.group(1)
    for key, value in (("repository", repository), ("digest", f'"{digest}"')):
        body, found = re.subn(rf"^(  {key}:)[^\n]*$", rf"\g<1> {value}", body, count=1, flags=re.MULTILINE)
        if not found:
            raise ReleaseError(f"values.yaml: image.{key} is missing")
    return values[: block.start(1)] + body + values[block.end(1):]


def package(chart: Path, dest: Path, repository: str | None, digest: str | None) -> Path:
    with tempfile.TemporaryDirectory(prefix="taint-operator-release-") as tmp:
        staged = Path(tmp) / chart.name
        shutil.copytree(chart, staged)
        if repository and digest:
            values = staged / "values.yaml"
            values.write_text(pin_image(values.read_text(), repository, digest))
            with helm.Chart.load(staged) as loaded:
                image = loaded.values["image"]
                if (image["repository"], image["digest"]) != (repository, digest):
                    raise ReleaseError(f"values.yaml: the pinned image reads back as {image}")
        report = helm.lint(staged, strict=True, kube_version=LINT_KUBE_VERSION)
        # severity: 1=info (e.g. "icon is recommended"), 2=warning, 3=error
        problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
        if problems:
            raise ReleaseError(f"helm lint --strict on the packaged chart: {json.dumps(problems)}")
        return Path(helm.package(staged, destination=dest))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chart", type=Path, required=True)
    parser.add_argument("--dest", type=Path, required=True)
    parser.add_argument("--image-repository")
    parser.add_argument("--image-digest")
    parser.add_argument("--image-ref", help="the pushed image's tag reference, for release.json")
    parser.add_argument("--push", metavar="oci://HOST/PATH")
    parser.add_argument("--plain-http", action="store_true")
    args = parser.parse_args()
    if bool(args.image_repository) != bool(args.image_digest):
        parser.error("--image-repository and --image-digest go together")
    if args.push and not args.push.startswith("oci://"):
        parser.error(f"--push: {args.push!r} is not an oci:// reference")

    try:
        archive = package(args.chart, args.dest, args.image_repository, args.image_digest)
        print(f"chart: {archive}")
        if not args.push:
            return 0
        pushed = registry.push(archive, args.push, plain_http=args.plain_http)
        with helm.Chart.load(archive) as loaded:
            name, version = loaded.name, loaded.version
        chart_ref = f"{args.push}/{name}"
        with registry.RegistryClient(plain_http=args.plain_http) as client:
            chart_digest = client.resolve(f"{chart_ref}:{version}")["digest"]
        record = {
            "version": version,
            "chart": chart_ref,
            "chartDigest": chart_digest,
            "image": args.image_ref,
            "imageRepository": args.image_repository,
            "imageDigest": args.image_digest,
        }
        (args.dest / "release.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"pushed: {chart_ref} --version {version} ({chart_digest}); {pushed.get('output', '').strip()}")
    except (ReleaseError, helm.HelmError) as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

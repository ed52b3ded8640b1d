"""The SIMULATED registry (sandbox/registry.py): the pull half of the OCI distribution API."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from radeonlab.sandbox import registry
from radeonlab.sandbox.ociimage import MANIFEST_TYPE, Image


def _image(tmp_path: Path, label: str) -> Image:
    blobs = tmp_path / label
    (blobs / "sha256").mkdir(parents=True)
    layer = label.encode() * 10
    (blobs / "sha256" / hashlib.sha256(layer).hexdigest()).write_bytes(layer)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "label": label}).encode()
    hexd = hashlib.sha256(manifest).hexdigest()
    (blobs / "sha256" / hexd).write_bytes(manifest)
    return Image("rocm/pytorch", "rocm7.2.4_tag", f"sha256:{hexd}", blobs, "2.9.1+rocm7.2.4")


def _get(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method)) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_serves_manifests_by_tag_and_digest_blobs_and_a_moved_tag(tmp_path: Path) -> None:
    first, second = _image(tmp_path, "first"), _image(tmp_path, "second")
    with registry.serve() as reg:
        base = f"http://{reg.address}/v2"
        assert _get(f"{base}/")[0] == 200
        ref = reg.push(first)
        assert ref == f"{reg.address}/rocm/pytorch:rocm7.2.4_tag"
        status, headers, body = _get(f"{base}/rocm/pytorch/manifests/rocm7.2.4_tag")
        assert status == 200 and headers["Content-Type"] == MANIFEST_TYPE
        assert headers["Docker-Content-Digest"] == first.digest
        assert "sha256:" + hashlib.sha256(body).hexdigest() == first.digest
        status, headers, body = _get(f"{base}/rocm/pytorch/manifests/{first.digest}", "HEAD")
        assert status == 200 and body == b"" and headers["Docker-Content-Digest"] == first.digest
        layer = "sha256:" + hashlib.sha256(b"first" * 10).hexdigest()
        assert _get(f"{base}/rocm/pytorch/blobs/{layer}")[2] == b"first" * 10
        assert reg.blob_gets == {layer: 1}
        assert _get(f"{base}/rocm/pytorch/manifests/other")[0] == 404
        assert _get(f"{base}/rocm/pytorch/blobs/sha256:{'0' * 64}")[0] == 404
        reg.push(second)  # another image under the same tag
        moved = _get(f"{base}/rocm/pytorch/manifests/rocm7.2.4_tag")[1]
        assert moved["Docker-Content-Digest"] == second.digest
        assert reg.pulls == {"rocm/pytorch:rocm7.2.4_tag": 2}  # manifest GETs only (HEAD, 404s: none)


@pytest.mark.parametrize("path", ["/v2/x/tags/list", "/v1/", "/v2/rocm/pytorch/blobs/md5:00"])
def test_anything_else_is_not_found(tmp_path: Path, path: str) -> None:
    with registry.serve() as reg:
        assert _get(f"http://{reg.address}{path}")[0] == 404

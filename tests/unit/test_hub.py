"""The SIMULATED Hub (radeonlab/sandbox/hub.py) answers the pinned huggingface_hub client as the Hub does:
revisions, listings with sizes and LFS data, downloads with the headers the client reads, Range, the error
codes the client maps to its exception types, counters, faults, and the child-process mode.
No sandbox hosts: the client runs in this process against a loopback server."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from radeonlab.sandbox import hub as sandbox_hub
from radeonlab.sandbox.hubcatalog import (
    DEMO_DATASET,
    FIRST_TAG,
    LLAMA3_8B,
    LLAMA3_70B,
    TINY_GATED,
    TINY_PUBLIC,
    TOKEN_DENIED,
    TOKEN_GRANTED,
    git_blob_sha1,
)
from tests.support.hubkit import catalog, sha256_of, tiny_assets

WEIGHTS = "model.safetensors"


@pytest.fixture
def hub() -> Iterator[sandbox_hub.Hub]:
    with sandbox_hub.serve(catalog()) as running:
        yield running


def api(hub: sandbox_hub.Hub, token: str | bool = False) -> HfApi:
    return HfApi(endpoint=hub.url, token=token)


def test_revisions_resolve_to_commit_shas(hub: sandbox_hub.Hub) -> None:
    main = api(hub).model_info(TINY_PUBLIC)
    first = api(hub).model_info(TINY_PUBLIC, revision=FIRST_TAG)
    assert len(main.sha) == 40 and len(first.sha) == 40 and main.sha != first.sha
    assert api(hub).model_info(TINY_PUBLIC, revision=first.sha).sha == first.sha  # a full sha resolves too
    assert {s.rfilename for s in first.siblings} == {"config.json", "README.md"}  # the older file set
    with pytest.raises(RevisionNotFoundError):
        api(hub).model_info(TINY_PUBLIC, revision="no-such-branch")


def test_listing_has_sizes_and_lfs_hashes_of_the_real_files(hub: sandbox_hub.Hub) -> None:
    model_dir, _ = tiny_assets()
    info = api(hub).model_info(TINY_PUBLIC, files_metadata=True)
    by_name = {s.rfilename: s for s in info.siblings}
    for path in model_dir.iterdir():
        assert by_name[path.name].size == path.stat().st_size
    weights = by_name[WEIGHTS]
    assert weights.lfs is not None and weights.lfs.sha256 == sha256_of(model_dir / WEIGHTS)
    config = by_name["config.json"]
    assert config.lfs is None and config.blob_id == git_blob_sha1((model_dir / "config.json").read_bytes())
    tree = {f.path: f.size for f in api(hub).list_repo_tree(TINY_PUBLIC, recursive=True)}
    assert tree == {name: s.size for name, s in by_name.items()}


def test_download_headers_are_what_the_client_reads(hub: sandbox_hub.Hub) -> None:
    model_dir, _ = tiny_assets()
    sha = api(hub).model_info(TINY_PUBLIC).sha
    regular = requests.head(f"{hub.url}/{TINY_PUBLIC}/resolve/main/config.json", timeout=10)
    assert regular.status_code == 200 and regular.headers["X-Repo-Commit"] == sha
    assert regular.headers["ETag"] == '"{}"'.format(git_blob_sha1((model_dir / "config.json").read_bytes()))
    lfs = requests.head(f"{hub.url}/{TINY_PUBLIC}/resolve/main/{WEIGHTS}", timeout=10, allow_redirects=False)
    assert lfs.status_code == 302 and lfs.headers["X-Repo-Commit"] == sha
    assert lfs.headers["X-Linked-Etag"] == f'"{sha256_of(model_dir / WEIGHTS)}"'
    assert int(lfs.headers["X-Linked-Size"]) == (model_dir / WEIGHTS).stat().st_size
    assert lfs.headers["Location"].startswith(f"{hub.url}/lfs-cdn/")


def test_range_requests(hub: sandbox_hub.Hub) -> None:
    content = (tiny_assets()[0] / WEIGHTS).read_bytes()
    url = f"{hub.url}/{TINY_PUBLIC}/resolve/main/{WEIGHTS}"
    tail = requests.get(url, headers={"Range": "bytes=1000-"}, timeout=10)
    assert tail.status_code == 206 and tail.content == content[1000:]
    assert tail.headers["Content-Range"] == f"bytes 1000-{len(content) - 1}/{len(content)}"
    assert requests.get(url, headers={"Range": "bytes=-10"}, timeout=10).content == content[-10:]
    assert requests.get(url, headers={"Range": f"bytes={len(content)}-"}, timeout=10).status_code == 416
    assert hub.bytes_served(TINY_PUBLIC, WEIGHTS) == len(content) - 1000 + 10


def test_downloads_are_byte_identical_and_counted_once(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    model_dir, _ = tiny_assets()
    folder = Path(snapshot_download(TINY_PUBLIC, cache_dir=tmp_path, endpoint=hub.url, token=False))
    for path in model_dir.iterdir():
        assert (folder / path.name).read_bytes() == path.read_bytes()
    snapshot_download(TINY_PUBLIC, cache_dir=tmp_path, endpoint=hub.url, token=False)  # all cached
    for path in model_dir.iterdir():
        assert hub.downloads(TINY_PUBLIC, path.name) == 1
        assert hub.bytes_served(TINY_PUBLIC, path.name) == path.stat().st_size


def test_unknown_repo_file_and_dataset_ids(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    with pytest.raises(RepositoryNotFoundError) as unknown:
        api(hub).model_info("nobody/nothing")
    assert unknown.value.response.status_code == 404
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(TINY_PUBLIC, "no-such-file.bin", cache_dir=tmp_path, endpoint=hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError):  # a dataset is no model ...
        api(hub).model_info(DEMO_DATASET)
    assert api(hub).dataset_info(DEMO_DATASET).sha  # ... but it is a dataset


def test_gated_repo_info_is_public_files_need_a_granted_token(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    assert api(hub).model_info(TINY_GATED).gated == "manual"  # as on the Hub: the page is public
    with pytest.raises(GatedRepoError) as no_token:
        api(hub).auth_check(TINY_GATED)
    assert no_token.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as denied:
        hf_hub_download(TINY_GATED, "config.json", cache_dir=tmp_path, endpoint=hub.url, token=TOKEN_DENIED)
    assert denied.value.response.status_code == 403
    api(hub, TOKEN_GRANTED).auth_check(TINY_GATED)
    hf_hub_download(TINY_GATED, WEIGHTS, cache_dir=tmp_path, endpoint=hub.url, token=TOKEN_GRANTED)
    assert hub.downloads(TINY_GATED, WEIGHTS, client="token:granted") == 1
    assert hub.bytes_served(TINY_GATED, client="token:denied") == 0


def test_unknown_token_is_rejected_as_invalid_credentials(hub: sandbox_hub.Hub) -> None:
    with pytest.raises(HfHubHTTPError) as bad:
        api(hub, "hf_notATokenTheHubKnows").model_info(TINY_PUBLIC)
    assert bad.value.response.status_code == 401
    assert not isinstance(bad.value, RepositoryNotFoundError)  # the client tells it apart by the message


def test_counts_per_client_by_token_or_origin(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    for n, headers in enumerate(({"User-Agent": "x; origin/ws1"}, {"User-Agent": "x; origin/ws2"})):
        hf_hub_download(TINY_PUBLIC, WEIGHTS, cache_dir=tmp_path / str(n), endpoint=hub.url, headers=headers)
    size = (tiny_assets()[0] / WEIGHTS).stat().st_size
    assert hub.bytes_served(TINY_PUBLIC, WEIGHTS, client="origin:ws1") == size
    assert hub.bytes_served(TINY_PUBLIC, WEIGHTS, client="origin:ws2") == size
    assert hub.downloads(TINY_PUBLIC, WEIGHTS) == 2


def test_cut_mid_file_then_down_then_back(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    hub.cut(TINY_PUBLIC, WEIGHTS, 300_000)
    with pytest.raises(requests.exceptions.RequestException):
        hf_hub_download(TINY_PUBLIC, WEIGHTS, cache_dir=tmp_path, endpoint=hub.url, token=False)
    [cut] = hub.transfers()
    assert (cut.sent, cut.complete) == (300_000, False)
    assert hub.down
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"{hub.url}/api/models/{TINY_PUBLIC}", timeout=10)
    hub.set_down(False)
    assert requests.get(f"{hub.url}/api/models/{TINY_PUBLIC}", timeout=10).status_code == 200


def test_config_only_repos_serve_the_real_llama3_configs(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    shapes = {}
    for repo_id in (LLAMA3_8B, LLAMA3_70B):
        assert [s.rfilename for s in api(hub).model_info(repo_id).siblings] == ["config.json", "README.md"]
        path = hf_hub_download(repo_id, "config.json", cache_dir=tmp_path, endpoint=hub.url, token=False)
        config = json.loads(Path(path).read_text())
        keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
        shapes[repo_id] = tuple(config[k] for k in (*keys, "num_key_value_heads", "vocab_size"))
    assert shapes[LLAMA3_8B] == (4096, 14336, 32, 32, 8, 128256)  # docs/reference/vram.md
    assert shapes[LLAMA3_70B] == (8192, 28672, 80, 64, 8, 128256)


def test_child_process_hub_killed_and_restarted_on_the_same_port(tmp_path: Path) -> None:
    with sandbox_hub.spawn(catalog()) as child:
        url = child.url
        hf_hub_download(TINY_PUBLIC, "config.json", cache_dir=tmp_path, endpoint=url, token=False)
        assert child.downloads(TINY_PUBLIC, "config.json") == 1
        child.kill()
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"{url}/api/models/{TINY_PUBLIC}", timeout=10)
        child.restart()
        assert child.url == url and child.transfers() == []
        content = requests.get(f"{url}/{TINY_PUBLIC}/resolve/main/config.json", timeout=10).content
        assert hashlib.sha256(content).hexdigest() == sha256_of(tiny_assets()[0] / "config.json")
        assert child.bytes_served(TINY_PUBLIC, "config.json") == len(content)


def test_binds_only_to_loopback() -> None:
    with pytest.raises(ValueError, match="127.0.0.0/8"):
        sandbox_hub.serve(catalog(), address="0.0.0.0")

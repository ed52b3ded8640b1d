"""radeonlab.jobs.fleet.inventory: pyinfra inventory files -> HostTarget records, with one-line errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from radeonlab import errors
from radeonlab.jobs.fleet.inventory import (
    HostTarget,
    InventoryError,
    get_host,
    load_inventory,
    select_hosts,
)

INVENTORY = """
_common = {"ssh_user": "lab", "ssh_key": "keys/id_ed25519", "ssh_known_hosts_file": "/srv/known_hosts"}
workstations = [
    ("ws1", {**_common, "ssh_hostname": "10.0.0.5", "ssh_port": 2201, "gpu_note": "7900"}),
    ("ws2", {**_common, "ssh_strict_host_key_checking": "accept-new"}),
]
big_vram = (["ws1"], {"lab_tier": "big"})
"""


def write(tmp_path: Path, text: str, name: str = "home.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_hosts_and_their_ssh_settings(tmp_path: Path) -> None:
    targets = load_inventory(write(tmp_path, INVENTORY))
    assert list(targets) == ["ws1", "ws2"]
    ws1 = targets["ws1"]
    assert isinstance(ws1, HostTarget)
    assert (ws1.hostname, ws1.port, ws1.user) == ("10.0.0.5", 2201, "lab")
    assert ws1.known_hosts_file == "/srv/known_hosts"
    assert ws1.known_hosts_name == "[10.0.0.5]:2201"
    # a relative key path that is not under the cwd resolves next to the inventory file
    assert ws1.key_filename == str(tmp_path / "keys/id_ed25519")
    assert ws1.strict_host_key_checking == "yes"  # our default, stricter than pyinfra's accept-new
    assert (ws1.allow_agent, ws1.look_for_keys) == (False, False)
    # group data arrives through pyinfra's own precedence; the file name is a group too (pyinfra's rule)
    assert ws1.data["lab_tier"] == "big" and ws1.data["gpu_note"] == "7900"
    assert set(ws1.groups) == {"workstations", "big_vram", "home"}
    ws2 = targets["ws2"]
    assert (ws2.hostname, ws2.port, ws2.known_hosts_name) == ("ws2", 22, "ws2")
    assert ws2.strict_host_key_checking == "accept-new"
    assert "lab_tier" not in ws2.data


def test_group_data_folder_beside_the_inventory(tmp_path: Path) -> None:
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text('ssh_user = "trainer"\n')
    targets = load_inventory(write(tmp_path, 'workstations = ["ws9"]\n'))
    assert targets["ws9"].user == "trainer"


def test_syntax_error_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'workstations = [\n    ("ws1", {"ssh_port": 22)\n]\n')
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    message = str(err.value)
    assert message.startswith(f"{path}:2: SyntaxError")
    assert "\n" not in message


def test_runtime_error_names_the_line(tmp_path: Path) -> None:
    path = write(
        tmp_path, 'import os\nworkstations = [("ws1", {"ssh_port": int(os.environ["NO_SUCH_VAR_X"])})]\n'
    )
    with pytest.raises(InventoryError, match=rf"^{path}:2: KeyError: 'NO_SUCH_VAR_X'$"):
        load_inventory(path)


def test_missing_file_is_not_taken_for_a_host_list(tmp_path: Path) -> None:
    # pyinfra itself would read "nope.py" as a host name; the job runner wants a file
    with pytest.raises(InventoryError, match="no such inventory file") as err:
        load_inventory(tmp_path / "nope.py")
    # radeonlab's own input error: the CLI prints it as it is and exits 2 (radeonlab/errors.py)
    assert isinstance(err.value, errors.InputError) and err.value.exit_code == errors.EXIT_USAGE


def test_accepting_any_host_key_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, 'hosts = [("ws1", {"ssh_strict_host_key_checking": "no"})]\n')
    with pytest.raises(InventoryError, match="ws1: ssh_strict_host_key_checking='no' is not supported"):
        load_inventory(path)


def test_unknown_host_lists_the_known_ones(tmp_path: Path) -> None:
    targets = load_inventory(write(tmp_path, INVENTORY))
    with pytest.raises(InventoryError) as err:
        get_host(targets, "ws3")
    assert str(err.value) == "unknown host 'ws3'; known hosts: ws1, ws2; groups: big_vram, home, workstations"
    assert get_host(targets, "ws2").name == "ws2"


def test_limit_by_name_group_and_glob(tmp_path: Path) -> None:
    targets = load_inventory(write(tmp_path, INVENTORY))
    names = lambda limit: [t.name for t in select_hosts(targets, limit)]  # noqa: E731
    assert names(None) == ["ws1", "ws2"]
    assert names("big_vram") == ["ws1"]
    assert names("ws2,big_vram") == ["ws2", "ws1"]
    assert names(["ws*"]) == ["ws1", "ws2"]
    with pytest.raises(InventoryError, match=r"no host or group matches 'gpu9'; known hosts: ws1, ws2"):
        select_hosts(targets, "gpu9")


def test_the_edited_file_is_read_again(tmp_path: Path) -> None:
    path = write(tmp_path, 'a = ["ws1"]\n')
    assert list(load_inventory(path)) == ["ws1"]
    path.write_text('a = ["ws1", "ws2"]\n')
    assert list(load_inventory(path)) == ["ws1", "ws2"]


def test_project_sandbox_inventory_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """inventories/sandbox.py (the file provisioning uses) read from a sandbox state dir."""
    (tmp_path / "inventory.json").write_text(
        '{"hosts": [{"name": "ws1", "ssh_hostname": "127.0.77.1", "ssh_port": 2201, "ssh_user": "lab",'
        ' "ssh_key": "/k/id", "ssh_known_hosts_file": "/k/known_hosts", "card": "rx7900xtx", "data": {}}]}'
    )
    monkeypatch.setenv("RADEONLAB_SANDBOX_DIR", str(tmp_path))
    inventory = Path(__file__).resolve().parents[2] / "inventories" / "sandbox.py"
    ws1 = load_inventory(inventory)["ws1"]
    assert (ws1.hostname, ws1.port, ws1.key_filename, ws1.known_hosts_file) == (
        "127.0.77.1",
        2201,
        "/k/id",
        "/k/known_hosts",
    )
    assert ws1.data["sandbox_card"] == "rx7900xtx"


def test_loading_an_inventory_leaves_this_process_unpatched(tmp_path: Path) -> None:
    """pyinfra_cli monkey-patches for gevent on import: the job runner's threads must stay threads."""
    import socket
    import threading

    inventory = tmp_path / "inv.py"
    inventory.write_text('workstations = [("ws1", {"ssh_hostname": "127.0.0.1"})]\n')
    assert list(load_inventory(inventory)) == ["ws1"]
    assert "pyinfra_cli" not in sys.modules
    assert threading.Lock.__module__ != "gevent.thread" and socket.socket.__module__ == "socket"

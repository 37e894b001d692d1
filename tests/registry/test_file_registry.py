"""FileRegistry: durability layout, corruption, and several writer processes sharing one file."""
from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from ingest.errors import RegistryError
from ingest.registry import PUMP, FileRegistry, NodeStatus, load_registry

WRITERS = 4
ROUNDS = 40


def _put_own_keys(path: str, writer: int, start: multiprocessing.synchronize.Event) -> None:
    start.wait()
    reg = FileRegistry(path)
    for i in range(ROUNDS):
        reg.put(f"/k/{writer}/{i:03d}", f"{writer}-{i}".encode())
        if i % 5 == 0:
            reg.delete(f"/k/{writer}/gone")
            reg.put(f"/k/{writer}/gone", b"x")


def _increment(path: str, start: multiprocessing.synchronize.Event) -> None:
    start.wait()
    reg = FileRegistry(path)

    def bump(keys: dict[str, bytes]) -> dict[str, bytes | None]:
        return {"/counter": str(int(keys.get("/counter", b"0")) + 1).encode()}

    for _ in range(ROUNDS):
        reg.update(bump)


def _run_writers(target: object, args_for: list[tuple[object, ...]]) -> None:
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=target, args=(*args, start)) for args in args_for]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * len(procs)


def test_concurrent_writer_processes_lose_no_keys(tmp_path: Path) -> None:
    path = str(tmp_path / "reg.json")
    _run_writers(_put_own_keys, [(path, w) for w in range(WRITERS)])
    got = FileRegistry(path).get_prefix("/k/")
    expected = {f"/k/{w}/{i:03d}": f"{w}-{i}".encode() for w in range(WRITERS) for i in range(ROUNDS)}
    expected.update({f"/k/{w}/gone": b"x" for w in range(WRITERS)})
    assert got == expected


def test_concurrent_read_modify_write_loses_no_update(tmp_path: Path) -> None:
    path = str(tmp_path / "reg.json")
    _run_writers(_increment, [(path,) for _ in range(WRITERS)])
    assert FileRegistry(path).get("/counter") == str(WRITERS * ROUNDS).encode()


def test_creates_parent_dirs_lock_file_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "registry.json"
    reg = FileRegistry(path)
    assert path.parent.is_dir() and not path.exists()
    assert reg.get_prefix("") == {}
    reg.put_node(PUMP, NodeStatus(node_id="p1", host="127.0.0.1:8250", max_commit_ts=7))
    reg.put("/other", b"v")
    reg.delete("/other")
    assert sorted(os.listdir(path.parent)) == ["registry.json", "registry.json.lock"]
    doc = json.loads(path.read_text())
    assert doc["version"] == 1
    # The file is human-readable: the Status JSON sits there as text.
    assert json.loads(doc["keys"]["/tidb-binlog/v1/pumps/p1"])["maxCommitTS"] == 7


def test_a_second_instance_sees_the_first_ones_writes(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    FileRegistry(path).put("/x", b"1")
    assert FileRegistry(path).get("/x") == b"1"


@pytest.mark.parametrize("content", [b"{truncated", b"[]", b'{"version": 1, "keys": {"/a": 5}}',
                                     b'{"version": 99, "keys": {}}', b""])
def test_corrupt_file_is_a_registry_error_naming_the_path(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "registry.json"
    path.write_bytes(content)
    reg = FileRegistry(path)
    for op in (lambda: reg.get("/a"), lambda: reg.get_prefix(""), lambda: reg.put("/a", b"1"),
               lambda: reg.delete("/a")):
        with pytest.raises(RegistryError, match=str(path)):
            op()
    assert path.read_bytes() == content  # a failed write never replaces what was there


def test_unwritable_directory_is_a_registry_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    with pytest.raises(RegistryError, match="file-not-dir"):
        FileRegistry(blocker / "registry.json")


def test_load_registry_file_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absolute = tmp_path / "abs" / "registry.json"
    reg = load_registry(f"file://{absolute}")
    assert isinstance(reg, FileRegistry) and reg.path == absolute
    reg.put("/k", b"v")
    assert absolute.exists()
    monkeypatch.chdir(tmp_path)
    rel = load_registry("file://rel/dir/registry.json")
    assert isinstance(rel, FileRegistry)
    rel.put("/k", b"v")
    assert (tmp_path / "rel" / "dir" / "registry.json").exists()

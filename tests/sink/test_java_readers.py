"""Java Iceberg reads what binlake writes: a Spark with Apache Iceberg's Java runtime (``make
iceberg-spark``: Spark 4.1 with iceberg-spark-runtime-4.1_2.13 1.12.0 in a virtualenv of its own,
since Maven Central has no runtime for binlake's Spark 4.3 yet) reads, through
``java_iceberg_reader.py``, every table, ref and snapshot that two tagged drains with DDL (ADD, DROP
and RENAME COLUMN, RENAME TABLE, DROP PRIMARY KEY: a mirror's partition spec moves), key changes,
partitioned tables (the mirrors' buckets, the changelogs' days), deletes and a mirror's position
deletes (merge-on-read) wrote, over the SQLite catalog (Iceberg's ``JdbcCatalog`` as the catalog
``binlake``, docs/readers.md) and over Apache Iceberg's REST catalog server; its reading equals
pyiceberg's (the rows of the current snapshot, of every ref and of every snapshot, the schemas with
their field ids, the partition specs, the refs, the snapshots' summaries, the properties).
One Spark session reads both catalogs."""
from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from tests.conftest import peer_built
from tests.drain.conftest import Env, make_env
from tests.servers import RestCatalogServer, iceberg_rest_classpath, iceberg_spark
from tests.sink.java_iceberg_reader import sorted_rows

pytestmark = pytest.mark.integration

READER = Path(__file__).with_name("java_iceberg_reader.py")


@dataclass
class Drained:
    """The two catalogs the drains wrote, pyiceberg's clients of them, and Java Iceberg's reading."""

    env: Env
    sqlite: Catalog
    rest: Catalog
    java: dict[str, Any]
    runs: list[int]


def _workload(env: Env, run: int) -> None:
    """The upstream changes of run 1 or 2 (on both emulated servers)."""
    if run == 1:
        env.sql("create table t (id int primary key, v varchar(20), n decimal(8,2), big bigint unsigned, "
                "f float, d double, day date, at datetime(6), ts timestamp(3) null, b varbinary(8), "
                "j json, e enum('x','y'), gone int)")
        env.sql("insert into t values " + ", ".join(
            f"({i}, 'v{i}', {i}.25, {18446744073709551000 + i}, {i}.5, {i}.125, '2024-01-{i + 1:02d}', "
            f"'2024-02-03 04:05:{i:02d}.123456', '2024-03-04 05:06:{i:02d}.5', x'0a{i:02x}', "
            f"'{{\"k\": {i}}}', '{'xy'[i % 2]}', {i})" for i in range(12)))
        env.sql("create table p (id int, k int, v varchar(10), primary key (id) nonclustered)", server=1)
        env.sql("insert into p values " + ", ".join(f"({i}, {i * 10}, 'p{i}')" for i in range(20)), server=1)
        env.sql("update t set id = 100 where id = 3; delete from t where id in (5, 6)")   # a key change, deletes
        env.sql("update t set n = 99.99, at = null where id in (2, 7)", server=1)
        env.sql("update p set v = 'moved', id = id + 50 where id < 4; delete from p where id = 9", server=1)
        env.sql("create table m (id int primary key, v varchar(10))")
        env.sql("insert into m values " + ", ".join(f"({i}, 'm{i}')" for i in range(40)), server=1)
    else:
        env.sql("update m set v = 'upd' where id in (3, 17); delete from m where id in (5, 30)")   # position deletes
        env.sql("update m set id = 140 where id = 8", server=1)
        env.sql("alter table t add column w int default 7")
        env.sql("alter table t drop column gone", server=1)
        env.sql("alter table t rename column v to vv")
        env.sql("insert into t (id, vv, n, w) values (200, 'new', 1.00, 8), (201, null, null, null)", server=1)
        env.sql("update t set id = 300, w = 9 where id = 4; delete from t where id in (1, 200)")
        env.sql("rename table p to p2", server=1)
        env.sql("update p2 set id = id + 1000, k = 0 where id in (10, 11); delete from p2 where id between 15 and 19")
        env.sql("alter table p2 drop primary key", server=1)        # the mirror's bucket spec moves
        env.sql("alter table p2 add column extra varchar(5) default 'e'")
        env.sql("insert into p2 (id, k) values (7000, 7), (7000, 8)", server=1)


@pytest.fixture(scope="module")
def drained(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[Drained]:
    """Two tagged runs drained into a SQLite catalog and into a REST catalog server of this module's
    own (the session's belongs to another cluster), then read by Java Iceberg in one Spark session."""
    python, jars = peer_built(iceberg_spark(), "the Spark with Iceberg's Java runtime", "iceberg-spark")
    rest_jars = peer_built(iceberg_rest_classpath(), "the Iceberg REST catalog's jars", "iceberg-rest")
    root = tmp_path_factory.mktemp("java-readers")
    with make_env(root) as env, RestCatalogServer(rest_jars) as server:
        env.options.iceberg.tag_runs = True
        rest_options = env.fresh_options("rest")
        rest_options.iceberg.warehouse = server.warehouse
        rest_options.iceberg.catalog_uri = server.uri
        runs = []
        for run in (1, 2):
            _workload(env, run)
            runs.append(env.drain()["to_ts"])
            env.drain(rest_options)
        warehouse = root / "warehouse"
        catalogs = {"binlake": {"type": "jdbc", "uri": f"jdbc:sqlite:{warehouse / 'catalog.db'}",
                                "warehouse": f"file://{warehouse}"},
                    "rest": {"type": "rest", "uri": server.uri}}
        out = root / "java.json"
        r = subprocess.run([str(python), str(READER), json.dumps(catalogs), ",".join(str(j) for j in jars), str(out)],
                           capture_output=True, text=True, timeout=600, cwd=root)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-6000:]
        sqlite = load_catalog("binlake", type="sql", uri=f"sqlite:///{warehouse / 'catalog.db'}",
                              warehouse=f"file://{warehouse}")
        rest = load_catalog("rest", type="rest", uri=server.uri)
        yield Drained(env, sqlite, rest, json.loads(out.read_text()), runs)


def _schema(schema: Schema) -> dict[str, Any]:
    """pyiceberg's ``Schema`` as the reader writes Java's."""
    return {"schema_id": schema.schema_id,
            "fields": [[f.field_id, f.name, str(f.field_type), f.required] for f in schema.fields]}


def _spec(spec: PartitionSpec) -> dict[str, Any]:
    """pyiceberg's ``PartitionSpec`` as the reader writes Java's."""
    return {"spec_id": spec.spec_id,
            "fields": [[f.source_id, f.field_id, f.name, str(f.transform)] for f in spec.fields]}


def _snapshot(s: Snapshot) -> dict[str, Any]:
    """pyiceberg's ``Snapshot`` as the reader writes Java's."""
    assert s.summary is not None
    return {"snapshot_id": s.snapshot_id, "parent_id": s.parent_snapshot_id, "schema_id": s.schema_id,
            "summary": {**s.summary.additional_properties, "operation": s.summary.operation.value}}


def _rows(table: Table, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    """The rows pyiceberg reads, now or at a snapshot (in that snapshot's schema), normalised as the reader's."""
    scan = table.scan() if snapshot_id is None else table.scan(snapshot_id=snapshot_id)
    return sorted_rows(scan.to_arrow().to_pylist())


def _table(table: Table) -> dict[str, Any]:
    """pyiceberg's reading of one table, in the reader's form. A branch is read in the table's current
    schema, a tag or a snapshot id in its snapshot's, as Spark reads ``VERSION AS OF``."""
    meta = table.metadata
    current = table.current_snapshot()
    refs = {name: {"type": ref.snapshot_ref_type.value, "snapshot_id": ref.snapshot_id}
            for name, ref in meta.refs.items()}

    def ref_rows(name: str) -> list[dict[str, Any]]:
        ref = meta.refs[name]
        if ref.snapshot_ref_type.value == "branch":      # binlake writes main only: the current snapshot
            assert name == "main" and ref.snapshot_id == meta.current_snapshot_id, (name, ref)
            return _rows(table)
        return _rows(table, ref.snapshot_id)

    return {
        "schema": _schema(table.schema()),
        "schemas": {str(s.schema_id): _schema(s) for s in meta.schemas},
        "spec": _spec(table.spec()),
        "specs": {str(s.spec_id): _spec(s) for s in meta.partition_specs},
        "properties": dict(table.properties),
        "current_snapshot_id": None if current is None else current.snapshot_id,
        "refs": refs,
        "snapshots": [_snapshot(s) for s in meta.snapshots],
        "rows": _rows(table) if current is not None else [],
        "ref_rows": {name: ref_rows(name) for name in sorted(refs)},
        "snapshot_rows": {str(s.snapshot_id): _rows(table, s.snapshot_id) for s in meta.snapshots},
    }


def pyiceberg_reading(catalog: Catalog) -> dict[str, Any]:
    """Every table of every namespace of ``catalog`` as pyiceberg reads it, by ``namespace.table``."""
    out: dict[str, Any] = {}
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            out[".".join(ident)] = _table(catalog.load_table(ident))
    return out


def _assert_same(java: dict[str, Any], ours: dict[str, Any]) -> None:
    """The two readings are equal, table by table and key by key (a short message on the first difference)."""
    assert sorted(java) == sorted(ours)
    for name in sorted(ours):
        for key in sorted(ours[name]):
            assert java[name][key] == ours[name][key], f"{name}: {key} differs"
        assert sorted(java[name]) == sorted(ours[name])


def _assert_covers(reading: dict[str, Any], runs: list[int]) -> None:
    """The drains wrote what the comparison is meant to cover: DDL, renames, partitions, tags, deletes."""
    t, p2 = reading["test.t"], reading["test.p2"]
    assert "test.p" not in reading and "test.p2__changelog" in reading and "test.t__changelog" in reading
    assert len(t["schemas"]) > 1 and len(p2["schemas"]) > 1
    names = [f[1] for f in t["schema"]["fields"]]
    assert "vv" in names and "w" in names and "v" not in names and "gone" not in names
    assert t["spec"]["fields"] and len(p2["specs"]) > 1                  # bucket specs; p2's moved
    for table in ("test.t", "test.p2", "test.t__changelog", "test.p2__changelog"):
        tags = {n for n, r in reading[table]["refs"].items() if r["type"] == "tag"}
        assert {f"tidb-ts-{ts}" for ts in runs} <= tags, (table, tags)
        assert len(reading[table]["snapshot_rows"]) >= 2
    ids = {r["id"] for r in t["rows"]}
    assert {100, 300, 201} <= ids and not {1, 3, 4, 5, 6, 200} & ids
    assert {1010, 1011, 7000, 50} <= {r["id"] for r in p2["rows"]}
    ops = {r["_tidb_op"] for r in reading["test.t__changelog"]["rows"]}
    assert ops == {"I", "U", "D"}
    m = reading["test.m"]   # merged on read: run 2's updates and deletes are position deletes
    assert m["snapshots"][-1]["summary"].get("added-position-delete-files", "0") != "0"
    assert m["snapshots"][-1]["summary"].get("deleted-data-files", "0") == "0"
    mids = {r["id"]: r["v"] for r in m["rows"]}
    assert mids[3] == mids[17] == "upd" and 140 in mids and not {5, 30, 8} & set(mids) and len(mids) == 38


def test_java_iceberg_reads_the_sqlite_catalog_as_pyiceberg_does(drained: Drained) -> None:
    java = drained.java["catalogs"]["binlake"]
    assert drained.java["spark"].startswith("4.1.")
    ours = pyiceberg_reading(drained.sqlite)
    _assert_covers(ours, drained.runs)
    _assert_same(java, ours)


def test_java_iceberg_reads_the_rest_catalog_as_pyiceberg_does(drained: Drained) -> None:
    java = drained.java["catalogs"]["rest"]
    ours = pyiceberg_reading(drained.rest)
    _assert_covers(ours, [])
    _assert_same(java, ours)

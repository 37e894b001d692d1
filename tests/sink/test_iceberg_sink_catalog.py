"""The Iceberg sink end to end on runs that carry DDL but no rows: plan, catalog moves, staging,
an empty Spark pass (no session needed) and the commits, on a SQLite catalog."""
from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from sink.errors import IncompatibleSchemaChange
from sink.iceberg import lineage
from sink.iceberg.catalog import open_catalog
from sink.iceberg.writer import IcebergSink
from tests.codec.tables import PK, col, table
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.model import HistoryInfo, Job, TableInfo
from transform.history import CREATE_TABLE, DROP_TABLE, MODIFY_COLUMN, RENAME_TABLE

CLUSTER = 7


def _info(tid: int, name: str, v: int = mt.TYPE_LONG, extra: bool = False) -> TableInfo:
    cols = [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "v", v, flen=20 if v == mt.TYPE_VARCHAR else -1)]
    if extra:
        cols.append(col(3, "w", mt.TYPE_LONG, origin_default=5))
    return table(tid, name, cols, pk_is_handle=True)


def _event(ts: int, tp: int, info: TableInfo | None, tid: int, before: tuple[str, str] | None = None,
           previous: TableInfo | None = None) -> ch.DDLEvent:
    job = Job(id=ts, type=tp, schema_id=1, table_id=tid, schema_name="test", query=f"DDL {tp} at {ts}",
              binlog=HistoryInfo(ts, None, info, 0))
    return ch.DDLEvent(ts, job, info, before, previous)


def _run(from_ts: int, to_ts: int, *tables: ch.TableChanges) -> ch.RunBatch:
    return ch.RunBatch(CLUSTER, from_ts, to_ts, f"b{to_ts}", {t.table_id: t for t in tables})


def _names(catalog: Catalog) -> list[str]:
    return sorted(n for _, n in catalog.list_tables("test"))


def _to_ts(catalog: Catalog, name: str) -> str:
    return catalog.load_table(f"test.{name}").properties["binlake.to-ts"]


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return open_catalog(str(tmp_path / "warehouse"))


def test_create_rename_and_drop_move_both_tables_and_record_the_lineage(catalog: Catalog) -> None:
    sink = IcebergSink(catalog)
    sink.check_cluster(CLUSTER)
    t = _info(10, "t")
    (report,) = sink.write(_run(0, 100, ch.TableChanges(10, "test", "t", t, [], [_event(50, CREATE_TABLE, t, 10)])))
    assert (report.table, report.rows, report.skipped) == ("test.t", {"I": 0, "U": 0, "D": 0}, "")
    assert _names(catalog) == ["t", "t__changelog"] and _to_ts(catalog, "t") == "100"

    u = _info(10, "u")
    rename = _run(100, 200, ch.TableChanges(10, "test", "u", u, [], [_event(150, RENAME_TABLE, u, 10, ("test", "t"))]))
    (report,) = sink.write(rename)
    assert report.table == "test.u" and _names(catalog) == ["u", "u__changelog"] and _to_ts(catalog, "u") == "200"

    drop = _run(200, 300, ch.TableChanges(10, "test", "u", None, [], [_event(250, DROP_TABLE, None, 10)]))
    (report,) = sink.write(drop)
    assert report.rows == {} and _names(catalog) == ["u__changelog_dropped_250", "u__dropped_250"]
    moves = lineage.moves(catalog.load_namespace_properties("_binlake"))
    assert [(m.old, m.new, m.kind) for m in moves] == [("test.t", "test.u", "rename"),
                                                        ("test.u", "test.u__dropped_250", "drop")]
    assert sink.write(drop)[0].skipped == "" and _names(catalog) == ["u__changelog_dropped_250", "u__dropped_250"]
    sink.save_checkpoint(drop)
    assert sink.checkpoint() == 300


def test_a_name_dropped_and_created_again_in_one_run_sets_the_old_tables_aside_first(catalog: Catalog) -> None:
    sink = IcebergSink(catalog)
    old, new = _info(20, "t"), _info(21, "t", v=mt.TYPE_VARCHAR)
    sink.write(_run(0, 100, ch.TableChanges(20, "test", "t", old, [], [_event(50, CREATE_TABLE, old, 20)])))
    run = _run(100, 200, ch.TableChanges(20, "test", "t", None, [], [_event(150, DROP_TABLE, None, 20)]),
               ch.TableChanges(21, "test", "t", new, [], [_event(160, CREATE_TABLE, new, 21)]))
    (report,) = sink.write(run)
    assert report.table == "test.t" and report.ddl == ["DDL 4 at 150", "DDL 3 at 160"]
    assert _names(catalog) == ["t", "t__changelog", "t__changelog_dropped_150", "t__dropped_150"]
    assert catalog.load_table("test.t").properties["binlake.table-id"] == "21"
    assert catalog.load_table("test.t__dropped_150").properties["binlake.table-id"] == "20"
    assert [r.skipped for r in sink.write(run)] == [f"already at to_ts={run.to_ts}"]   # a re-run changes nothing
    assert _names(catalog) == ["t", "t__changelog", "t__changelog_dropped_150", "t__dropped_150"]


def test_a_refused_evolution_fails_its_table_in_its_turn_after_the_tables_before_it(catalog: Catalog) -> None:
    sink = IcebergSink(catalog)
    a, b = _info(30, "a"), _info(31, "b")
    sink.write(_run(0, 100, ch.TableChanges(30, "test", "a", a, [], [_event(50, CREATE_TABLE, a, 30)]),
                    ch.TableChanges(31, "test", "b", b, [], [_event(60, CREATE_TABLE, b, 31)])))
    a2, b2 = _info(30, "a", extra=True), _info(31, "b", v=mt.TYPE_VARCHAR)   # b: v INT → VARCHAR, same id
    run = _run(100, 200, ch.TableChanges(30, "test", "a", a2, [], [_event(150, MODIFY_COLUMN, a2, 30, previous=a)]),
               ch.TableChanges(31, "test", "b", b2, [], [_event(160, MODIFY_COLUMN, b2, 31, previous=b)]))
    with pytest.raises(IncompatibleSchemaChange, match="column 'v' changes from int to string"):
        sink.write(run)
    assert _to_ts(catalog, "a") == _to_ts(catalog, "a__changelog") == "200"       # committed before b failed
    assert _to_ts(catalog, "b") == _to_ts(catalog, "b__changelog") == "100"

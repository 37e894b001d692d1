"""The Iceberg sink's plan (``sink.iceberg.plan``): what a run does to which Iceberg tables, decided
from the run's metadata and the tables' properties alone (no catalog, no Spark)."""
from __future__ import annotations

import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

from sink.iceberg import lineage
from sink.iceberg import schema as ks
from sink.iceberg.plan import (
    Drop,
    Rename,
    merge_buckets,
    moving_bucket,
    needs_backfill,
    plan_run,
    progress,
    reset_ts,
)
from sink.iceberg.tables import bucket_spec
from tests.codec.tables import PK, col, table
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.model import HistoryInfo, Job, TableInfo
from transform.history import CREATE_TABLE, DROP_TABLE, RENAME_TABLE, TRUNCATE_TABLE

FROM, TO = 100, 1000


def _info(tid: int, name: str, key: str = "id", extra: tuple[str, ...] = ()) -> TableInfo:
    cols = [col(1, key, mt.TYPE_LONG, flag=PK), col(2, "v", mt.TYPE_LONG)]
    cols += [col(3 + i, c, mt.TYPE_LONG, origin_default=7) for i, c in enumerate(extra)]
    return table(tid, name, cols, pk_is_handle=True)


def _event(ts: int, tp: int, tid: int, info: TableInfo | None, before: tuple[str, str] | None = None,
           version: int = 1) -> ch.DDLEvent:
    job = Job(id=ts, type=tp, schema_id=1, table_id=tid, schema_name="test", query=f"DDL {tp} at {ts}",
              binlog=HistoryInfo(version, None, info, 0))
    return ch.DDLEvent(ts, job, info, before)


def _changes(tid: int, name: str, final: TableInfo | None, *events: ch.DDLEvent, rows: int = 0,
             info: TableInfo | None = None, version: int = 1) -> ch.TableChanges:
    shape = final or info or _info(tid, name)
    segments = [ch.Segment(version, shape, rows, "test")] if rows else []
    return ch.TableChanges(tid, "test", name, final, segments, list(events))


def _run(*tables: ch.TableChanges) -> ch.RunBatch:
    return ch.RunBatch(1, FROM, TO, "batch", {t.table_id: t for t in tables})


def test_one_table_with_rows_is_one_plan_writing_its_changelog_and_mirror() -> None:
    t = _info(10, "t")
    (p,) = plan_run(_run(_changes(10, "t", t, rows=5, version=3)))
    assert (p.table, p.mirror, p.changelog) == ("test.t", ("test", "t"), ("test", "t__changelog"))
    assert p.live is not None and p.live.table_id == 10 and p.info == t and p.version == 3
    assert (p.renames, p.moves, p.drop, p.source_ids) == ([], [], None, {10})


def test_a_truncate_chains_both_ids_into_one_plan_whose_changelog_takes_both() -> None:
    old, new = _info(10, "t"), _info(11, "t")
    truncated = _changes(10, "t", None, _event(300, TRUNCATE_TABLE, 10, new), rows=2, info=old)
    (p,) = plan_run(_run(truncated, _changes(11, "t", new, rows=3, version=2)))
    assert p.source_ids == {10, 11} and p.live is not None and p.live.table_id == 11 and p.drop is None
    assert p.version == 2 and p.info == new


def test_a_name_dropped_and_created_again_is_two_plans_the_dropped_one_first() -> None:
    old, new = _info(20, "t"), _info(21, "t")
    dropped = _changes(20, "t", None, _event(200, DROP_TABLE, 20, None), rows=4, info=old)
    created = _changes(21, "t", new, _event(300, CREATE_TABLE, 21, new), rows=1)
    first, second = plan_run(_run(created, dropped))
    assert first.table == second.table == "test.t"
    assert first.live is None and first.info == old and first.source_ids == {20}
    assert first.drop == Drop(200, ("test", "t__dropped_200"), ("test", "t__changelog_dropped_200"), frozenset({21}))
    assert first.changelog == ("test", "t__changelog_dropped_200")     # its rows go to the changelog set aside
    assert second.drop is None and second.live is not None and second.live.table_id == 21
    assert second.changelog == ("test", "t__changelog") and second.source_ids == {21}
    # a table recording the new id is the new table (a crashed attempt created it): it is not set aside
    assert first.drop.moves({"binlake.table-id": "20"}) and first.drop.moves({})
    assert not first.drop.moves({"binlake.table-id": "21"})


def test_a_drop_without_rows_only_moves_tables_and_an_end_without_a_drop_drops_the_mirror() -> None:
    gone = ch.TableChanges(31, "test", "u", None, [], [_event(510, DROP_TABLE, 31, None)])
    (q,) = plan_run(_run(gone))
    assert q.info is None and q.drop is not None and q.drop.kept == ("test", "u__dropped_510")
    ended = ch.TableChanges(32, "test", "w", None, [], [])
    (r,) = plan_run(_run(ended))
    assert r.drop == Drop(None, None, None) and r.changelog == ("test", "w__changelog")


def test_a_table_renamed_away_moves_before_the_table_that_takes_its_name() -> None:
    a2, b = _info(41, "a"), _info(40, "b")
    renamed = _changes(40, "b", b, _event(200, RENAME_TABLE, 40, b, before=("test", "a")), rows=1)
    created = _changes(41, "a", a2, _event(300, CREATE_TABLE, 41, a2), rows=1)
    first, second = plan_run(_run(created, renamed))
    assert (first.table, second.table) == ("test.b", "test.a")
    assert first.renames == [Rename(("test", "a"), ("test", "b"))] and second.renames == []
    assert first.moves == [lineage.Move(200, "test.a", "test.b", lineage.RENAME)]


def test_two_renames_of_one_table_record_each_step() -> None:
    c = _info(50, "c")
    events = (_event(200, RENAME_TABLE, 50, _info(50, "b"), before=("test", "a")),
              _event(300, RENAME_TABLE, 50, c, before=("test", "b")))
    (p,) = plan_run(_run(_changes(50, "c", c, *events, rows=1)))
    assert p.renames == [Rename(("test", "a"), ("test", "c")), Rename(("test", "b"), ("test", "c"))]
    assert [(m.old, m.new) for m in p.moves] == [("test.a", "test.b"), ("test.b", "test.c")]


def test_names_swapped_in_one_run_keep_name_order() -> None:
    a, b = _info(61, "a"), _info(60, "b")
    was_b = _changes(61, "a", a, _event(300, RENAME_TABLE, 61, a, before=("test", "b")), rows=1)
    was_a = _changes(60, "b", b, _event(200, RENAME_TABLE, 60, b, before=("test", "a")), rows=1)
    assert [p.table for p in plan_run(_run(was_a, was_b))] == ["test.b", "test.a"]   # a cycle: the rename refuses


def test_progress_skips_a_table_at_the_runs_to_ts_and_resumes_a_crashed_runs_table_after_its_own() -> None:
    run = _run()
    assert progress({}, run) == ("", FROM)
    assert progress({"binlake.to-ts": "50"}, run) == ("", FROM)
    assert progress({"binlake.to-ts": "400"}, run) == ("", 400)
    assert progress({"binlake.to-ts": str(TO)}, run) == (f"already at to_ts={TO}", TO)


def test_the_mirror_starts_over_at_a_truncate_or_when_it_holds_another_table_id() -> None:
    old, new = _info(10, "t"), _info(11, "t")
    truncated = _changes(10, "t", None, _event(300, TRUNCATE_TABLE, 10, new), rows=2, info=old)
    (p,) = plan_run(_run(truncated, _changes(11, "t", new, rows=3)))
    run = _run()
    assert reset_ts(p, {"binlake.table-id": "10"}, True, FROM, run) == 300
    assert reset_ts(p, {"binlake.table-id": "11"}, True, 400, run) is None   # a crashed run emptied it already
    (q,) = plan_run(_run(_changes(11, "t", new, rows=3)))
    assert reset_ts(q, {"binlake.table-id": "11"}, True, FROM, run) is None
    assert reset_ts(q, {"binlake.table-id": "9"}, True, FROM, run) == 0        # another (ended) id's rows
    assert reset_ts(q, {"binlake.table-id": "9"}, False, FROM, run) is None    # … but it holds none


def test_the_bucket_moves_with_the_first_key_column() -> None:
    by_id = _info(70, "t")
    schema = ks.mirror_schema(by_id)
    spec = bucket_spec(schema, "id", 4)
    props = ks.table_properties(by_id, 1)
    assert moving_bucket(spec, schema, props, by_id) is None
    assert moving_bucket(spec, schema, props, _info(70, "t", key="k")) is None   # column 1 renamed: same column
    rekeyed = table(70, "t", [col(1, "id", mt.TYPE_LONG), col(2, "v", mt.TYPE_LONG, flag=PK)], pk_is_handle=True)
    assert moving_bucket(spec, schema, props, rekeyed) == 4
    no_key = table(70, "t", [col(1, "id", mt.TYPE_LONG), col(2, "v", mt.TYPE_LONG)])
    assert moving_bucket(spec, schema, props, no_key) == 4                      # now keyed by _tidb_rowid
    assert moving_bucket(UNPARTITIONED_PARTITION_SPEC, schema, props, rekeyed) is None


@pytest.mark.parametrize(("buckets", "expected"), [(4, 4), (1, 1)])
def test_the_merge_routes_to_the_mirrors_buckets_of_its_first_key_column(buckets: int, expected: int) -> None:
    info = _info(80, "t")
    schema = ks.mirror_schema(info)
    meta = new_table_metadata(schema, bucket_spec(schema, "id", buckets), UNSORTED_SORT_ORDER, "file:///w/t", {})
    n, typ = merge_buckets(meta, "id")
    assert n == expected and (typ is None) == (expected == 1)
    assert merge_buckets(meta, "v") == (1, None)    # bucketed by another column: one bucket


def test_a_column_added_with_a_default_rewrites_every_file_of_the_same_table() -> None:
    before, after = _info(90, "t"), _info(90, "t", extra=("w",))
    props = ks.table_properties(before, 1)
    assert needs_backfill(props, after)
    assert not needs_backfill(props, before)
    assert not needs_backfill(ks.table_properties(_info(91, "t"), 1), after)   # another table id: started over

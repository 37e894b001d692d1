"""transform.snapshot_proof: a read of the upstream at a ts agrees with the DDL history there, or says
how it does not (a table renamed, truncated or altered after the ts shown as such), except while a
DDL job ran at the ts."""
from __future__ import annotations

from tests.codec.tables import PK, col, table
from transform.codec import mysqltypes as mt
from transform.codec.model import HistoryInfo, Job, TableInfo
from transform.history import SchemaHistory
from transform.snapshot_proof import SETTLING, ReadTable, differences, running_at

MS = 1 << 18
T0 = 1000 * MS   # the CREATE jobs finish here; the later jobs start at T0 + 300 ms and after


def _info(tid: int, name: str, *extra: str) -> TableInfo:
    cols = [col(1, "id", mt.TYPE_LONG, flag=PK), col(2, "note", mt.TYPE_VARCHAR, flen=10)]
    cols += [col(3 + i, n, mt.TYPE_LONG) for i, n in enumerate(extra)]
    return table(tid, name, cols, pk_is_handle=True)


def _job(jid: int, tp: int, version: int, info: TableInfo, start_ms: int, finish_ms: int) -> Job:
    return Job(id=jid, type=tp, schema_id=1, table_id=info.id, schema_name="d", state=6, query=f"job {jid}",
               start_ts=T0 + start_ms * MS,
               binlog=HistoryInfo(version, {"db_name": {"O": "d", "L": "d"}}, info, T0 + finish_ms * MS))


HISTORY = SchemaHistory([
    _job(1, 3, 1, _info(10, "comp"), -50, 0), _job(2, 3, 2, _info(20, "cvar"), -40, 0),
    _job(3, 3, 3, _info(30, "nopk"), -30, 0),
    _job(4, 14, 4, _info(10, "comp2"), 300, 320),            # RENAME TABLE comp TO comp2
    _job(5, 6, 5, _info(20, "cvar", "w"), 450, 460),         # ADD COLUMN w
    _job(6, 11, 6, _info(31, "nopk"), 500, 510),             # TRUNCATE TABLE nopk: a new table id
])
BEFORE = {("d", "comp"): ReadTable(10, ("id", "note")), ("d", "cvar"): ReadTable(20, ("id", "note")),
          ("d", "nopk"): ReadTable(30, ("id", "note"))}
AFTER = {("d", "comp2"): ReadTable(10, ("id", "note")), ("d", "cvar"): ReadTable(20, ("id", "note", "w")),
         ("d", "nopk"): ReadTable(31, ("id", "note"))}


def _all(db: str, table: str) -> bool:
    return True


def test_a_read_of_the_tables_the_history_has_at_the_ts_is_proven() -> None:
    assert differences(HISTORY, T0 + 200 * MS, BEFORE, _all) == []
    assert differences(HISTORY, T0 + 2000 * MS, AFTER, _all) == []
    without_ids = {k: ReadTable(None, v.columns) for k, v in AFTER.items()}      # MySQL, the emulator
    assert differences(HISTORY, T0 + 2000 * MS, without_ids, _all) == []


def test_a_read_showing_the_tables_after_the_ts_is_told_apart() -> None:
    ts = T0 + 200 * MS
    found = differences(HISTORY, ts, AFTER, _all)
    assert found == [
        f"d.comp is not in the read; the DDL history has it at ts {ts} (table id 10)",
        f"d.comp2 is in the read; the DDL history has no such table at ts {ts}",
        f"d.cvar has columns (id, note, w) in the read, (id, note) in the DDL history at ts {ts}",
        f"d.nopk is table id 31 in the read, 30 in the DDL history at ts {ts}"]
    assert differences(HISTORY, ts, AFTER, lambda d, t: t == "nopk") == [found[3]]
    assert differences(HISTORY, T0 + 5000 * MS, BEFORE, _all) != []           # older than the ts, too


def test_a_difference_on_a_table_a_job_ran_on_is_allowed() -> None:
    assert not running_at(HISTORY, T0 + 200 * MS)
    assert [j.id for j in running_at(HISTORY, T0 + 310 * MS)] == [4]          # the RENAME ran
    assert [j.id for j in running_at(HISTORY, T0 + 320 * MS + SETTLING - 1)] == [4]   # its binlog may commit after
    assert not running_at(HISTORY, T0 + 510 * MS + SETTLING)
    mid_rename = {**BEFORE, ("d", "comp2"): BEFORE[("d", "comp")]}
    del mid_rename[("d", "comp")]
    assert differences(HISTORY, T0 + 310 * MS, mid_rename, _all) == []            # after the RENAME
    assert differences(HISTORY, T0 + 330 * MS, BEFORE, _all) == []                # not yet, 10 ms after FinishedTS
    assert differences(HISTORY, T0 + 310 * MS, {**mid_rename, ("d", "nopk"): AFTER[("d", "nopk")]}, _all) == [
        f"d.nopk is table id 31 in the read, 30 in the DDL history at ts {T0 + 310 * MS}"]   # not the RENAME's

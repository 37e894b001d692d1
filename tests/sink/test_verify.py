"""``sink.iceberg.verify`` (and ``sink.compare``): mirror tables in a real SQLite-catalog Iceberg warehouse
against hand-written and upstream snapshots rendered by ``transform.codec.values.json_value``."""
from __future__ import annotations

import datetime as dt
import json
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from sink.compare import VerifyError
from sink.errors import SinkError
from sink.iceberg.catalog import open_catalog
from sink.iceberg.verify import choose_snapshot, comparable, same_value, verify_mirrors
from transform.codec.values import InvalidTime, json_value
from upstream.status_api import render_rows

UTC = dt.UTC
META = [("_tidb_commit_ts", LongType()), ("_tidb_commit_time", TimestamptzType())]


def f32(x: float) -> float:
    """``x`` narrowed to float32, as the emulator holds FLOAT values."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return open_catalog(str(tmp_path / "wh"))


def make_table(catalog: Catalog, name: str, columns: list[tuple[str, IcebergType]], keys: list[str]) -> Table:
    """A mirror table: ``columns`` + the metadata columns, identifier fields ``keys``."""
    db, tbl = name.split(".", 1)
    catalog.create_namespace_if_not_exists(db)
    fields = [NestedField(i + 1, n, t, required=n in keys)
              for i, (n, t) in enumerate(columns + META)]
    ids = [f.field_id for f in fields if f.name in keys]
    return catalog.create_table((db, tbl), Schema(*fields, identifier_field_ids=ids))


def marks(from_ts: int, to_ts: int, batch: str = "b") -> dict[str, str]:
    return {"binlake.from-ts": str(from_ts), "binlake.to-ts": str(to_ts), "binlake.batch-id": batch,
            "binlake.cluster-id": "c1"}


def arrow(table: Table, rows: list[dict[str, Any]], commit_ts: int = 1) -> pa.Table:
    stamp = dt.datetime(2024, 1, 1, tzinfo=UTC)
    full = [{**r, "_tidb_commit_ts": commit_ts, "_tidb_commit_time": stamp} for r in rows]
    return pa.Table.from_pylist(full, schema=table.schema().as_arrow())


def append(table: Table, rows: list[dict[str, Any]], from_ts: int, to_ts: int) -> int:
    """Append ``rows`` as one snapshot marked ``(from_ts, to_ts]``; its id."""
    table.append(arrow(table, rows, to_ts), snapshot_properties=marks(from_ts, to_ts))
    return table.current_snapshot().snapshot_id


def wire(snapshot: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """What StatusClient.snapshot returns for the emulator's Python values (render + JSON round trip)."""
    return json.loads(json.dumps(render_rows(snapshot), ensure_ascii=False))


# ---------------------------------------------------------------------------------------------
# every MySQL type family (docs/architecture.md, 4.5): Python (emulator) value, Iceberg type, the value the
# drainer writes

BIG = Decimal("123456789012345678901234567890123456789012345.12345")
TYPES: list[tuple[str, IcebergType, Any, Any]] = [
    # column, mirror type, upstream Python value, mirror (Arrow) value
    ("c_tiny", IntegerType(), -128, -128),
    ("c_int", IntegerType(), 2147483647, 2147483647),
    ("c_int_u", LongType(), 4294967295, 4294967295),
    ("c_big", LongType(), -9223372036854775808, -9223372036854775808),
    ("c_big_u", DecimalType(20, 0), 18446744073709551615, Decimal(18446744073709551615)),
    ("c_dec", DecimalType(10, 2), Decimal("-12.30"), Decimal("-12.30")),
    ("c_dec_tiny", DecimalType(30, 12), Decimal("0.000000000123"), Decimal("0.000000000123")),
    ("c_dec_zero", DecimalType(30, 12), Decimal(0).quantize(Decimal("1E-12")), Decimal("0E-12")),
    ("c_dec_big", StringType(), BIG, format(BIG, "f")),
    ("c_dec_big0", StringType(), Decimal(0).quantize(Decimal("1E-10")), "0.0000000000"),
    ("c_float", FloatType(), f32(0.1), f32(0.1)),
    ("c_double", DoubleType(), 1e300 / 3, 1e300 / 3),
    ("c_date", DateType(), dt.date(2024, 2, 29), dt.date(2024, 2, 29)),
    ("c_date_zero", DateType(), InvalidTime("0000-00-00"), None),
    ("c_dt", TimestampType(), dt.datetime(2024, 1, 2, 3, 4, 5, 678), dt.datetime(2024, 1, 2, 3, 4, 5, 678)),
    ("c_dt_s", TimestampType(), dt.datetime(1000, 1, 1), dt.datetime(1000, 1, 1)),
    ("c_dt_y1", TimestampType(), dt.datetime(1, 1, 1, 0, 0, 0, 1), dt.datetime(1, 1, 1, 0, 0, 0, 1)),
    ("c_date_y1", DateType(), dt.date(1, 1, 1), dt.date(1, 1, 1)),
    ("c_dt_zero", TimestampType(), InvalidTime("0000-00-00 00:00:00"), None),
    ("c_ts", TimestamptzType(), dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
     dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC)),
    ("c_time", StringType(), "-838:59:59.000000", "-838:59:59.000000"),
    ("c_year", IntegerType(), 2155, 2155),
    ("c_char", StringType(), "héllo ✓", "héllo ✓"),
    ("c_text", StringType(), "line\nbreak", "line\nbreak"),
    ("c_enum", StringType(), "b", "b"),
    ("c_set", StringType(), "a,c", "a,c"),
    ("c_json", StringType(), '{"a": [1, 2.5, null]}', '{"a": [1, 2.5, null]}'),
    ("c_bin", BinaryType(), b"\x00\xff\x10 ", b"\x00\xff\x10 "),
    ("c_bit", LongType(), 2 ** 64 - 1, -1),
    ("c_bit_small", LongType(), 5, 5),
    ("c_null", StringType(), None, None),
]
NULLED_IN_TYPES = 2   # c_date_zero, c_dt_zero


def all_types_table(catalog: Catalog) -> Table:
    t = make_table(catalog, "test.types", [("id", LongType())] + [(c, ty) for c, ty, _, _ in TYPES], ["id"])
    rows = [{"id": i, **{c: m for c, _, _, m in TYPES}} for i in (1, 2)]
    append(t, rows, 0, 100)
    return t


def all_types_upstream() -> dict[str, list[dict[str, Any]]]:
    return {"test.types": [{"id": i, **{c: u for c, _, u, _ in TYPES}} for i in (1, 2)]}


@pytest.mark.parametrize("column,mirror_type,python,stored", TYPES, ids=[c for c, *_ in TYPES])
def test_a_mirror_value_compares_equal_to_its_upstream_rendering(column: str, mirror_type: IcebergType, python: Any,
                                                                stored: Any) -> None:
    # The value the mirror hands back (through Arrow, as the verifier reads it) compares equal to
    # the upstream's rendering after the JSON round trip of /binlake/snapshot.
    arr = pa.array([stored], type=Schema(NestedField(1, "x", mirror_type)).as_arrow().field("x").type)
    back = arr.to_pylist()[0]
    upstream = json.loads(json.dumps(json_value(python)))
    if stored is None:
        assert back is None
    else:
        assert same_value(mirror_type, comparable(mirror_type, upstream), comparable(mirror_type, json_value(back)))


@pytest.mark.parametrize("value, rendered", [
    (None, None), (True, 1), (0, 0), (-(2 ** 70), -(2 ** 70)), (1.5, 1.5), (float("nan"), "nan"),
    (float("inf"), "inf"), (float("-inf"), "-inf"), (-0.0, -0.0), (Decimal("1.10"), "1.10"),
    (Decimal("0E-10"), "0E-10"), (Decimal("-1E+3"), "-1E+3"), (dt.date(1, 1, 1), "0001-01-01"),
    (dt.date(9999, 12, 31), "9999-12-31"), (dt.datetime(1, 1, 1, 0, 0, 0, 1), "1-01-01 00:00:00.000001"),
    (dt.datetime(2020, 5, 6, 7, 8, 9), "2020-05-06 07:08:09"),
    (dt.datetime(2020, 5, 6, 7, 8, 9, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))), "2020-05-06 01:38:09"),
    (b"", ""), (b"\x00", "AA=="), (bytearray(b"abc"), "YWJj"), (memoryview(b"xyz"), "eHl6"), ("", ""),
    ("0000-00-00", "0000-00-00"), (dt.time(1, 2, 3), "01:02:03"),
])
def test_json_value_rules(value: Any, rendered: Any) -> None:
    """One rendering serves both sides of verify (the upstream's snapshot and the mirror)."""
    got = json_value(value)
    assert got == rendered and type(got) is type(rendered)


def test_all_types_equal_is_ok(catalog: Catalog) -> None:
    all_types_table(catalog)
    report = verify_mirrors(catalog, wire(all_types_upstream()), 100)
    t = report.table("test.types")
    assert report.ok, report.format()
    assert (t.compared, t.missing, t.extra, t.differing) == (2, 0, 0, 0)
    assert t.nulled == 2 * NULLED_IN_TYPES
    assert "nulled 4" in report.format()


OTHER: dict[str, Any] = {
    "c_tiny": -127, "c_int": 2147483646, "c_int_u": 4294967294, "c_big": 7, "c_big_u": 18446744073709551614,
    "c_dec": Decimal("-12.31"), "c_dec_tiny": Decimal("0.000000000124"),
    "c_dec_zero": Decimal("0.000000000001"), "c_dec_big": BIG + 1, "c_dec_big0": Decimal("0.0000000001"),
    "c_float": f32(0.1000001), "c_double": 1e300 / 3 * (1 + 2 ** -50), "c_date": dt.date(2024, 2, 28),
    "c_date_zero": dt.date(2000, 1, 1), "c_dt": dt.datetime(2024, 1, 2, 3, 4, 5, 679),
    "c_dt_s": dt.datetime(1000, 1, 1, 0, 0, 1), "c_dt_zero": dt.datetime(2000, 1, 1),
    "c_dt_y1": dt.datetime(1, 1, 1, 0, 0, 0, 2), "c_date_y1": dt.date(1, 1, 2),
    "c_ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999998, tzinfo=UTC), "c_time": "-838:59:58.000000",
    "c_year": 2154, "c_char": "hello ✓", "c_text": "line\r\nbreak", "c_enum": "a", "c_set": "a",
    "c_json": '{"a": [1, 2.5]}', "c_bin": b"\x00\xff\x11 ", "c_bit": 2 ** 64 - 2, "c_bit_small": 4,
    "c_null": "",
}


@pytest.mark.parametrize("column", [c for c, *_ in TYPES])
def test_every_type_detects_a_changed_value(catalog: Catalog, column: str) -> None:
    all_types_table(catalog)
    up = all_types_upstream()
    up["test.types"][1][column] = OTHER[column]
    report = verify_mirrors(catalog, wire(up), 100)
    t = report.table("test.types")
    assert not report.ok
    assert (t.compared, t.differing, t.missing, t.extra) == (2, 1, 0, 0)
    [ex] = t.examples
    assert ex.kind == "differing" and ex.key == {"id": 2} and list(ex.columns) == [column]
    assert ex.columns[column][0] == json.loads(json.dumps(json_value(OTHER[column])))


def test_float_tolerance_is_float32_for_float_only(catalog: Catalog) -> None:
    t = make_table(catalog, "test.f", [("id", IntegerType()), ("f", FloatType()), ("d", DoubleType())], ["id"])
    append(t, [{"id": 1, "f": 0.1, "d": 0.1}], 0, 10)
    assert verify_mirrors(catalog, {"test.f": [{"id": 1, "f": 0.1, "d": 0.1}]}, 10).ok
    bad = verify_mirrors(catalog, {"test.f": [{"id": 1, "f": 0.1, "d": 0.1000000001}]}, 10)
    assert not bad.ok and list(bad.table("test.f").examples[0].columns) == ["d"]


# ---------------------------------------------------------------------------------------------
# counts

def simple(catalog: Catalog, name: str = "test.t") -> Table:
    return make_table(catalog, name, [("id", IntegerType()), ("v", StringType())], ["id"])


def test_missing_extra_differing_counts(catalog: Catalog) -> None:
    t = simple(catalog)
    append(t, [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "X"}, {"id": 4, "v": "d"},
               {"id": 6, "v": "f"}], 0, 50)
    up = {"test.t": [{"id": i, "v": v} for i, v in [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]]}
    report = verify_mirrors(catalog, up, 50)
    r = report.table("test.t")
    assert not report.ok
    assert (r.upstream_rows, r.mirror_rows, r.compared, r.missing, r.extra, r.differing) == (5, 5, 4, 1, 1, 1)
    kinds = {e.kind: e for e in r.examples}
    assert kinds["missing"].key == {"id": 5} and kinds["missing"].row == {"id": 5, "v": "e"}
    assert kinds["extra"].key == {"id": 6}
    assert kinds["differing"].columns == {"v": ("c", "X")}
    text = report.format()
    assert "DIFF" in text and "id=5" in text and "upstream 'c' != mirror 'X'" in text
    data = json.loads(json.dumps(report.to_json()))
    assert data["ok"] is False and data["tables"][0]["missing"] == 1


def test_equal_is_ok(catalog: Catalog) -> None:
    t = simple(catalog)
    append(t, [{"id": 1, "v": "a"}, {"id": 2, "v": None}], 0, 50)
    report = verify_mirrors(catalog, {"test.t": [{"id": 2, "v": None}, {"id": 1, "v": "a"}]}, 50)
    assert report.ok, report.format()
    assert report.table("test.t").compared == 2
    assert report.to_json()["ok"] is True


def test_examples_are_limited_per_kind(catalog: Catalog) -> None:
    t = simple(catalog)
    append(t, [{"id": 1000 + i, "v": "x"} for i in range(30)], 0, 5)
    up = {"test.t": [{"id": i, "v": "x"} for i in range(30)]}
    r = verify_mirrors(catalog, up, 5, max_examples=3).table("test.t")
    assert (r.missing, r.extra) == (30, 30)
    assert [e.kind for e in r.examples] == ["missing"] * 3 + ["extra"] * 3


def test_duplicate_keys_in_mirror_differ(catalog: Catalog) -> None:
    t = simple(catalog)
    append(t, [{"id": 1, "v": "a"}], 0, 5)
    append(t, [{"id": 1, "v": "a"}], 0, 5)
    r = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}]}, 5)
    assert not r.ok and r.table("test.t").duplicates == 1


# ---------------------------------------------------------------------------------------------
# which snapshot

def test_snapshot_chosen_by_marker_not_a_later_one(catalog: Catalog) -> None:
    t = simple(catalog)
    first = append(t, [{"id": 1, "v": "a"}], 0, 10)
    second = append(t, [{"id": 2, "v": "b"}], 10, 20)
    at10 = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}]}, 10)
    assert at10.ok, at10.format()
    assert at10.table("test.t").snapshot_id == first and at10.table("test.t").to_ts == 10
    at20 = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]}, 20)
    assert at20.ok and at20.table("test.t").snapshot_id == second
    # the state at 20 is not the state at 10
    wrong = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]}, 10)
    assert not wrong.ok and wrong.table("test.t").missing == 1


def test_newest_snapshot_of_a_run_is_used(catalog: Catalog) -> None:
    t = simple(catalog)
    append(t, [{"id": 1, "v": "a"}], 0, 10)
    with t.transaction() as tx:     # a merge: delete the changed key, append its new image
        tx.delete("id = 1", snapshot_properties=marks(10, 20))
        tx.append(arrow(t, [{"id": 1, "v": "b"}]), snapshot_properties=marks(10, 20))
    t = catalog.load_table(("test", "t"))
    assert choose_snapshot(t, 20).snapshot == t.current_snapshot()
    assert verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "b"}]}, 20).ok
    assert not verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}]}, 20).ok


def test_untouched_table_uses_its_last_snapshot(catalog: Catalog) -> None:
    t = simple(catalog)
    first = append(t, [{"id": 1, "v": "a"}], 0, 10)
    report = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}]}, 30)
    assert report.ok and report.table("test.t").snapshot_id == first
    append(t, [{"id": 2, "v": "b"}], 20, 30)      # not touched by the run (10, 20]
    at20 = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}]}, 20)
    assert at20.ok and at20.table("test.t").snapshot_id == first


def test_ts_inside_a_run_has_no_snapshot(catalog: Catalog) -> None:
    t = simple(catalog)
    append(t, [{"id": 1, "v": "a"}], 0, 10)
    append(t, [{"id": 2, "v": "b"}], 10, 30)
    report = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}]}, 20)
    assert not report.ok
    assert any("no snapshot at 20" in p for p in report.table("test.t").problems)
    assert "no snapshot at 20" in report.format()


def test_only_later_snapshots(catalog: Catalog) -> None:
    t = simple(catalog)
    append(t, [{"id": 1, "v": "a"}], 10, 20)
    # T inside the only run: no snapshot at T
    inside = verify_mirrors(catalog, {"test.t": []}, 15)
    assert not inside.ok and "no snapshot at 15" in inside.table("test.t").problems[0]
    # T before the first run that wrote the table: it was empty then
    before_empty = verify_mirrors(catalog, {"test.t": []}, 10)
    assert before_empty.ok, before_empty.format()
    before_rows = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}]}, 10)
    assert not before_rows.ok and before_rows.table("test.t").missing == 1


def test_unmarked_snapshots_are_not_used(catalog: Catalog) -> None:
    t = simple(catalog)
    t.append(arrow(t, [{"id": 1, "v": "a"}]))
    report = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}]}, 10)
    assert not report.ok and "no snapshot at 10" in report.table("test.t").problems[0]


def test_table_without_snapshot_is_empty(catalog: Catalog) -> None:
    simple(catalog)
    assert verify_mirrors(catalog, {"test.t": []}, 10).ok
    r = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a"}]}, 10)
    assert not r.ok and r.table("test.t").missing == 1


# ---------------------------------------------------------------------------------------------
# zero dates, keys

def test_nulled_zero_dates(catalog: Catalog) -> None:
    t = make_table(catalog, "test.d", [("id", IntegerType()), ("d", DateType()), ("ts", TimestampType())], ["id"])
    append(t, [{"id": 1, "d": None, "ts": None}, {"id": 2, "d": None, "ts": dt.datetime(2020, 1, 1)},
               {"id": 3, "d": None, "ts": None}], 0, 10)
    up = {"test.d": [{"id": 1, "d": "0000-00-00", "ts": "0000-00-00 00:00:00"},
                     {"id": 2, "d": "2021-02-30", "ts": "2020-01-01 00:00:00"},
                     {"id": 3, "d": None, "ts": None}]}
    report = verify_mirrors(catalog, up, 10)
    assert report.ok, report.format()
    assert report.table("test.d").nulled == 3
    # a valid upstream date held as NULL is a difference, not a nulled value
    up["test.d"][2]["d"] = "2021-02-28"
    bad = verify_mirrors(catalog, up, 10)
    assert not bad.ok and bad.table("test.d").differing == 1 and bad.table("test.d").nulled == 3
    # a zero date upstream must not match a non-NULL mirror value
    up["test.d"][2]["d"] = None
    up["test.d"][1]["ts"] = "0000-00-00 00:00:00"
    assert not verify_mirrors(catalog, up, 10).ok


def test_composite_primary_key(catalog: Catalog) -> None:
    t = make_table(catalog, "shop.orders", [("a", IntegerType()), ("b", StringType()), ("v", LongType())],
                   ["a", "b"])
    append(t, [{"a": 1, "b": "x", "v": 10}, {"a": 1, "b": "y", "v": 11}, {"a": 2, "b": "x", "v": 12}], 0, 7)
    ok = {"shop.orders": [{"a": 1, "b": "y", "v": 11}, {"a": 2, "b": "x", "v": 12}, {"a": 1, "b": "x", "v": 10}]}
    assert verify_mirrors(catalog, ok, 7).ok
    bad = {"shop.orders": [{"a": 1, "b": "x", "v": 10}, {"a": 1, "b": "y", "v": 99}, {"a": 2, "b": "y", "v": 12}]}
    r = verify_mirrors(catalog, bad, 7).table("shop.orders")
    assert (r.compared, r.differing, r.missing, r.extra) == (2, 1, 1, 1)
    assert {e.kind: e.key for e in r.examples} == {
        "differing": {"a": 1, "b": "y"}, "missing": {"a": 2, "b": "y"}, "extra": {"a": 2, "b": "x"}}


def test_rowid_tables(catalog: Catalog) -> None:
    t = make_table(catalog, "test.nopk", [("v", StringType()), ("_tidb_rowid", LongType())], ["_tidb_rowid"])
    append(t, [{"v": "same", "_tidb_rowid": 1}, {"v": "same", "_tidb_rowid": 2}], 0, 9)
    up = {"test.nopk": [{"v": "same", "_tidb_rowid": 1}, {"v": "same", "_tidb_rowid": 2}]}
    assert verify_mirrors(catalog, up, 9).ok
    up["test.nopk"][1]["_tidb_rowid"] = 3
    r = verify_mirrors(catalog, up, 9).table("test.nopk")
    assert (r.compared, r.missing, r.extra) == (1, 1, 1)
    assert {e.kind: e.key for e in r.examples} == {"missing": {"_tidb_rowid": 3}, "extra": {"_tidb_rowid": 2}}


def test_nonclustered_primary_key_ignores_upstream_rowid(catalog: Catalog) -> None:
    t = make_table(catalog, "test.nc", [("k", StringType()), ("v", IntegerType())], ["k"])
    append(t, [{"k": "a", "v": 1}], 0, 3)
    assert verify_mirrors(catalog, {"test.nc": [{"k": "a", "v": 1, "_tidb_rowid": 77}]}, 3).ok


def test_unsigned_bigint_key(catalog: Catalog) -> None:
    t = make_table(catalog, "test.u", [("id", DecimalType(20, 0)), ("v", IntegerType())], ["id"])
    append(t, [{"id": Decimal(2 ** 64 - 1), "v": 1}, {"id": Decimal(0), "v": 2}], 0, 3)
    assert verify_mirrors(catalog, {"test.u": [{"id": 2 ** 64 - 1, "v": 1}, {"id": 0, "v": 2}]}, 3).ok
    r = verify_mirrors(catalog, {"test.u": [{"id": 2 ** 64 - 2, "v": 1}, {"id": 0, "v": 2}]}, 3)
    assert r.table("test.u").missing == 1 and r.table("test.u").extra == 1


# ---------------------------------------------------------------------------------------------
# tables and columns

def test_missing_mirror_table(catalog: Catalog) -> None:
    r = verify_mirrors(catalog, {"test.gone": [{"id": 1}], "test.empty": []}, 5)
    assert not r.ok
    assert r.table("test.gone").missing == 1 and r.table("test.gone").problems
    assert r.table("test.empty").ok
    assert verify_mirrors(catalog, {"test.empty": []}, 5).ok


def test_column_sets_must_match(catalog: Catalog) -> None:
    t = simple(catalog)
    append(t, [{"id": 1, "v": "a"}], 0, 5)
    extra_up = verify_mirrors(catalog, {"test.t": [{"id": 1, "v": "a", "w": 3}]}, 5)
    assert not extra_up.ok and "columns only upstream: w" in extra_up.table("test.t").problems
    fewer_up = verify_mirrors(catalog, {"test.t": [{"id": 1}]}, 5)
    assert not fewer_up.ok and "columns only in the mirror: v" in fewer_up.table("test.t").problems


def test_filters(catalog: Catalog) -> None:
    a = simple(catalog, "test.a")
    append(a, [{"id": 1, "v": "a"}], 0, 5)
    up = {"test.a": [{"id": 1, "v": "a"}], "test.b": [{"id": 1, "v": "b"}],
          "mysql.user": [{"id": 1}], "INFORMATION_SCHEMA.x": [{"id": 1}]}
    only_a = verify_mirrors(catalog, up, 5, tables=["TEST.A", "test.nope"])
    assert only_a.ok and [t.table for t in only_a.tables] == ["test.a"]
    assert set(only_a.skipped) == {"test.b", "mysql.user", "INFORMATION_SCHEMA.x"}
    assert only_a.unmatched == ["test.nope"]
    everything = verify_mirrors(catalog, up, 5)
    assert [t.table for t in everything.tables] == ["test.a", "test.b"] and not everything.ok
    custom = verify_mirrors(catalog, up, 5, allows=lambda db, tbl: tbl != "b")
    assert [t.table for t in custom.tables] == ["INFORMATION_SCHEMA.x", "mysql.user", "test.a"]


def test_malformed_upstream_snapshot(catalog: Catalog) -> None:
    for bad in ([], {"nodot": []}, {"test.t": {"id": 1}}, {"test.t": [1]}):
        with pytest.raises(VerifyError) as err:
            verify_mirrors(catalog, bad, 1)
        assert isinstance(err.value, SinkError)

"""``binlake verify --ts T``, the Iceberg side: every mirror table, read at the snapshot a drain marked
``binlake.to-ts = T``, compared with the upstream's snapshot at ``T`` key by key (``sink.compare``).

Both sides are brought to one JSON rendering (``transform.codec.values.json_value``, which the
upstream's snapshot uses too) and then to a comparison form (:func:`comparable`) that absorbs the
documented type mappings: BIGINT UNSIGNED is ``decimal(20,0)`` in the mirror but a number upstream,
BIT(64) is wrapped into a signed ``long``, DECIMAL(M>38) is a plain-notation string, FLOAT is compared
at float32 precision. Zero/invalid dates, which the mirror stores as NULL, are counted as *nulled*,
not as differences.

Snapshot choice per table (newest first along the main branch, snapshots without markers ignored):
the newest snapshot with ``to-ts == T``; else the newest one with ``to-ts < T`` provided no later
snapshot's run started before ``T`` (the table was not touched by the runs up to ``T``); else, when
every marked snapshot belongs to a run starting at or after ``T``, the empty table before the first
write (unless that oldest snapshot had a parent, e.g. one ``binlake maintain`` expired); else the snapshot
tagged ``tidb-ts-T`` (``--tag-runs``; tags outlive the expiry of the snapshots around them); otherwise
the table is reported with "no snapshot at T". ``binlake check`` finds its snapshots the same way.

A table renamed or dropped after ``T`` is looked up by what it was called at ``T``: the lineage the
Iceberg sink records (``sink.iceberg.lineage``) names the Iceberg table holding it now.
"""
from __future__ import annotations

import datetime as dt
import math
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pyiceberg import types as it
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from sink.changelog import CHANGELOG_SUFFIX, TO_TS_KEY, RunMarkers, tag_name
from sink.compare import (
    DEFAULT_MAX_EXAMPLES,
    Expired,
    Row,
    ValueRules,
    VerifyError,
    check_snapshot,
    compare_rows,
    compare_tables,
)
from sink.iceberg import lineage
from sink.iceberg.catalog import table_or_none
from sink.verify_report import TableResult, VerifyReport
from transform.changes import COMMIT_TIME, COMMIT_TS, ROWID
from transform.codec.values import json_value
from transform.filters import TableFilter

METADATA_COLUMNS = frozenset({COMMIT_TS, COMMIT_TIME})

_LONG_WRAP = 1 << 64
_LONG_MAX = (1 << 63) - 1
_F32 = struct.Struct("<f")
_TEMPORAL = (it.DateType, it.TimestampType, it.TimestamptzType)
_SHORT_YEAR = re.compile(r"(\d{1,3})-\d\d-\d\d")
_EXP_NUMBER = re.compile(r"-?\d+(\.\d+)?[eE][-+]?\d+\Z")


def _as_float(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def comparable(ftype: it.IcebergType, v: Any) -> Any:
    """The comparison form of a rendered value ``v`` of a mirror column of type ``ftype``: equal
    forms mean equal values. Ints > 2^63-1 in a ``long`` wrap (BIT(64)); ints in a decimal column
    become their text (BIGINT UNSIGNED); numbers in exponent notation in a string column become plain
    notation (DECIMAL(M>38) is written as plain text, ``str(Decimal)`` may use an exponent); floats
    are rounded to float32 for ``float`` columns (NaN and infinities become their text); date/time
    text gets a 4-digit year."""
    if v is None:
        return None
    if isinstance(ftype, (it.IntegerType, it.LongType)):
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int) and v > _LONG_MAX:
            return v - _LONG_WRAP
        return v
    if isinstance(ftype, it.DecimalType):
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        return v
    if isinstance(ftype, _TEMPORAL) and isinstance(v, str):
        m = _SHORT_YEAR.match(v)
        return f"{int(m.group(1)):04d}{v[m.end(1):]}" if m else v
    if isinstance(ftype, it.StringType) and isinstance(v, str) and _EXP_NUMBER.match(v):
        return format(Decimal(v), "f")
    if isinstance(ftype, (it.FloatType, it.DoubleType)):
        f = _as_float(v)
        if f is None:
            return v
        if isinstance(ftype, it.FloatType) and not (math.isnan(f) or math.isinf(f)):
            try:
                f = _F32.unpack(_F32.pack(f))[0]
            except OverflowError:
                pass
        return str(f) if math.isnan(f) or math.isinf(f) else f
    return v


def same_value(ftype: it.IcebergType, upstream: Any, mirror: Any) -> bool:
    """True when the comparison forms (:func:`comparable`) of an upstream and a mirror value are equal."""
    if isinstance(upstream, bool) or isinstance(mirror, bool):
        return bool(upstream == mirror)
    if type(upstream) is not type(mirror) and not (
            isinstance(upstream, (int, float)) and isinstance(mirror, (int, float))):
        return False
    return bool(upstream == mirror)


def _valid_temporal(ftype: it.IcebergType, text: str) -> bool:
    """True when ``text`` (upstream rendering) is a date/datetime Python (hence Iceberg) can hold."""
    try:
        if isinstance(ftype, it.DateType):
            dt.date.fromisoformat(text)
        else:
            dt.datetime.fromisoformat(text)
        return True
    except ValueError:
        return False


def _is_nulled(ftype: it.IcebergType, upstream: Any, mirror: Any) -> bool:
    return (mirror is None and isinstance(upstream, str) and isinstance(ftype, _TEMPORAL)
            and not _valid_temporal(ftype, upstream))


class _MirrorValues(ValueRules):
    """Upstream values in their comparison form against a mirror's, which its rows hold already."""

    def __init__(self, types: Mapping[str, it.IcebergType]) -> None:
        self.types = types

    def upstream_key(self, row: Row, keys: Sequence[str]) -> tuple[Any, ...]:
        return tuple(comparable(self.types[c], row.get(c)) for c in keys)

    def copy_key(self, row: Row, keys: Sequence[str]) -> tuple[Any, ...]:
        return tuple(row.get(c) for c in keys)

    def same(self, column: str, upstream: Any, copy: Any) -> bool:
        t = self.types[column]
        return same_value(t, comparable(t, upstream), copy)

    def nulled(self, column: str, upstream: Any, copy: Any) -> bool:
        t = self.types[column]
        return _is_nulled(t, comparable(t, upstream), copy)


# ---------------------------------------------------------------------------------------------
# snapshot choice

@dataclass(frozen=True)
class MarkedSnapshot:
    """A snapshot and the run that wrote it (its summary's markers)."""

    snapshot: Snapshot
    run: RunMarkers


def marked_snapshots(table: Table) -> list[MarkedSnapshot]:
    """The snapshots on the table's main line that carry run markers, newest first."""
    meta = table.metadata
    current = meta.current_snapshot()
    if current is None:
        return []
    out = []
    for snap in ancestors_of(current, meta):
        run = RunMarkers.from_summary(snap.summary.additional_properties) if snap.summary is not None else None
        if run is not None:
            out.append(MarkedSnapshot(snap, run))
    return out


@dataclass(frozen=True)
class SnapshotChoice:
    """The snapshot a table is compared at: ``snapshot`` None means the empty table; ``problem`` set
    means there is no snapshot representing ``ts``."""

    snapshot: Snapshot | None
    to_ts: int | None = None
    note: str = ""
    problem: str = ""


def choose_snapshot(table: Table, ts: int) -> SnapshotChoice:
    """The snapshot of ``table`` holding the state at upstream ``ts`` (rules in the module docstring)."""
    choice = _along_main(table, ts)
    tag = table.metadata.refs.get(tag_name(ts))
    if choice.problem and tag is not None:
        tagged = table.metadata.snapshot_by_id(tag.snapshot_id)
        if tagged is not None:
            return SnapshotChoice(tagged, ts, note=f"the snapshot tagged {tag_name(ts)}")
    return choice


def _along_main(table: Table, ts: int) -> SnapshotChoice:
    if table.metadata.current_snapshot() is None:
        return SnapshotChoice(None, note="the table has no snapshot yet (compared as empty)")
    marked = marked_snapshots(table)
    if not marked:
        return SnapshotChoice(None, problem=f"no snapshot at {ts}: no snapshot carries binlake markers")
    newer: MarkedSnapshot | None = None
    for m in marked:                      # newest first
        if m.run.to_ts == ts:
            return SnapshotChoice(m.snapshot, m.run.to_ts)
        if m.run.to_ts < ts:
            if newer is None or newer.run.from_ts >= ts:
                return SnapshotChoice(m.snapshot, m.run.to_ts,
                                      note=f"not written by any run since to-ts {m.run.to_ts}")
            return SnapshotChoice(None, problem=(
                f"no snapshot at {ts}: it falls inside the run ({newer.run.from_ts}, {newer.run.to_ts}] "
                f"(snapshot {newer.snapshot.snapshot_id})"))
        newer = m
    oldest = marked[-1]
    # a parent, or one expired (pyiceberg then clears the id; the sequence number shows it was not the first)
    unmarked_before = oldest.snapshot.parent_snapshot_id is not None or (oldest.snapshot.sequence_number or 0) > 1
    if oldest.run.from_ts >= ts and not unmarked_before:
        return SnapshotChoice(None, note=f"first written by the run ({oldest.run.from_ts}, {oldest.run.to_ts}] "
                                         f"(compared as empty)")
    return SnapshotChoice(None, problem=f"no snapshot at {ts}: the oldest marked snapshot has to-ts "
                                        f"{oldest.run.to_ts}")


# ---------------------------------------------------------------------------------------------
# the mirror's rows

def _key_columns(table: Table, schema: Schema) -> list[str]:
    names = [schema.find_column_name(i) for i in schema.identifier_field_ids]
    if not names:
        current = table.schema()
        names = [current.find_column_name(i) for i in current.identifier_field_ids]
    if not names and any(f.name == ROWID for f in schema.fields):
        names = [ROWID]
    # keep the schema's column order for stable output
    order = {f.name: i for i, f in enumerate(schema.fields)}
    return sorted((n for n in names if n is not None), key=lambda n: order.get(n, len(order)))


def _upstream_columns(rows: Sequence[Row]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        for c in r:
            seen.setdefault(c, None)
    return list(seen)


def _load(catalog: Catalog, name: str | tuple[str, ...]) -> Table | None:
    try:
        return table_or_none(catalog, name)
    except Exception as e:  # pyiceberg/SQLAlchemy/IO errors
        raise VerifyError(f"cannot load the mirror table {name}: {e}") from e


def verify_table(catalog: Catalog, name: str, upstream: Sequence[Row], ts: int,
                 max_examples: int = DEFAULT_MAX_EXAMPLES, mirror: str | tuple[str, ...] | None = None,
                 expired: Expired | None = None) -> TableResult:
    """Compare one upstream table's rendered rows with its mirror ``name`` at upstream ``ts``; ``mirror``
    names the Iceberg table holding it now when it was renamed or dropped after ``ts`` (an identifier
    tuple: any table of the catalog, e.g. one ``binlake restore`` wrote)."""
    result = TableResult(name, upstream_rows=len(upstream))
    if isinstance(mirror, str) and mirror.lower() != name.lower():
        result.notes.append(f"renamed or dropped after {ts}: the mirror is now {mirror}")
    table = _load(catalog, mirror or name)
    if table is None:
        if upstream:
            result.missing = len(upstream)
            result.problems.append("no mirror table in the catalog")
        else:
            result.notes.append("empty upstream and no mirror table")
        return result
    choice = choose_snapshot(table, ts)
    if choice.note:
        result.notes.append(choice.note)
    if choice.problem:
        result.problems.append(choice.problem)
        return result
    try:
        if choice.snapshot is None:
            schema = table.schema()
            arrow = schema.as_arrow().empty_table()
        else:
            result.snapshot_id, result.to_ts = choice.snapshot.snapshot_id, choice.to_ts
            current = table.current_snapshot()
            if (current is not None and current.snapshot_id == choice.snapshot.snapshot_id
                    and table.properties.get(TO_TS_KEY) == str(ts)):
                scan = table.scan()  # a DDL-only run at ts evolved the schema without a new snapshot
            else:
                scan = table.scan(snapshot_id=choice.snapshot.snapshot_id)
            schema = scan.projection()
            arrow = scan.to_arrow()
    except Exception as e:
        raise VerifyError(f"cannot read the mirror table {name} at snapshot "
                          f"{result.snapshot_id}: {e}") from e
    keys = _key_columns(table, schema)
    if not keys:
        result.problems.append("the mirror has no identifier fields (primary key or _tidb_rowid)")
        return result
    result.mirror_rows = arrow.num_rows
    types = {f.name: f.field_type for f in schema.fields}
    data_cols = [f.name for f in schema.fields if f.name not in METADATA_COLUMNS]
    up_cols = _upstream_columns(upstream)
    if upstream:
        only_up = [c for c in up_cols if c not in types and not (c == ROWID and ROWID not in keys)]
        only_mirror = [c for c in data_cols if c not in up_cols]
        if only_up:
            result.problems.append(f"columns only upstream: {', '.join(only_up)}")
        if only_mirror:
            result.problems.append(f"columns only in the mirror: {', '.join(only_mirror)}")
    lacking = [k for k in keys if upstream and k not in up_cols]
    if lacking:
        result.problems.append(f"upstream rows lack the mirror's key column(s) {', '.join(lacking)}")
        return result
    # the mirror's rows in their comparison form
    columns = [[comparable(types[c], json_value(v)) for v in
                (arrow.column(c).to_pylist() if c in arrow.column_names else [None] * arrow.num_rows)]
               for c in data_cols]
    rows = [dict(zip(data_cols, values)) for values in zip(*columns)]
    common = [c for c in data_cols if c in set(up_cols)] if upstream else data_cols
    compare_rows(result, keys, common, upstream, rows, _MirrorValues(types), max_examples, expired=expired)
    return result


def _meta_properties(catalog: Catalog) -> dict[str, str]:
    """The ``_binlake`` namespace's properties (the renames and drops the sink recorded); none yet: {}."""
    try:
        return dict(catalog.load_namespace_properties(lineage.META_NAMESPACE))
    except NoSuchNamespaceError:
        return {}
    except Exception as e:  # pyiceberg/SQLAlchemy/IO errors
        raise VerifyError(f"cannot read the namespace {lineage.META_NAMESPACE}: {e}") from e


def verify_mirrors(catalog: Catalog, upstream_snapshot: dict[str, list[dict[str, Any]]], ts: int,
                   tables: list[str] | None = None, *, max_examples: int = DEFAULT_MAX_EXAMPLES,
                   allows: Callable[[str, str], bool] | None = None,
                   expired: Mapping[str, Expired] | None = None) -> VerifyReport:
    """Compare every table of ``upstream_snapshot`` (the upstream at ``ts``, values rendered as by
    ``/binlake/snapshot``) with its mirror ``db.table`` in ``catalog`` at the snapshot marked
    ``binlake.to-ts = ts``, key by key.

    ``tables`` (``db.table`` names, case-insensitive) limits the comparison; ``allows(db, table)``
    (default: TiDB Binlog's ``ignore-schemas`` defaults, e.g. ``TableFilter.allows``) drops tables the
    drain does not replicate. Left-out tables are listed in ``skipped``; changelog tables are never
    compared; ``expired`` (per table with TTL) sets aside the rows the upstream's TTL had expired.
    Raises :class:`~sink.compare.VerifyError` for a malformed snapshot or an unreadable mirror.
    """
    check_snapshot(upstream_snapshot)
    replicated = allows or TableFilter().allows
    moved = lineage.moves(_meta_properties(catalog))

    def compare(name: str, rows: Sequence[Row]) -> TableResult:
        return verify_table(catalog, name, rows, ts, max_examples, lineage.name_at(moved, name, ts)[0],
                            (expired or {}).get(name))

    return compare_tables(upstream_snapshot, ts, compare,
                          lambda db, tbl: replicated(db, tbl) and not tbl.endswith(CHANGELOG_SUFFIX), tables)

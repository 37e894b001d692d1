"""``binlake verify --ts T``: compare every Iceberg mirror table, at the snapshot a drain marked
``binlake.to-ts = T``, with the upstream's snapshot at ``T`` (``GET /binlake/snapshot?ts=T``), key by key.

Both sides are brought to one JSON rendering (``transform.codec.values.json_value``, which the
upstream's snapshot uses too) and then to a comparison form that
absorbs the documented type mappings: BIGINT UNSIGNED is ``decimal(20,0)`` in the mirror
but a number upstream, BIT(64) is wrapped into a signed ``long``, DECIMAL(M>38) is a plain-notation
string, FLOAT is compared at float32 precision. Zero/invalid dates, which the mirror stores as NULL,
are counted as *nulled*, not as differences.

Snapshot choice per table (newest first along the main branch, snapshots without markers ignored):
the newest snapshot with ``to-ts == T``; else the newest one with ``to-ts < T`` provided no later
snapshot's run started before ``T`` (the table was not touched by the runs up to ``T``); else, when
every marked snapshot belongs to a run starting at or after ``T``, the empty table before the first
write (unless that oldest snapshot had a parent, e.g. one ``binlake maintain`` expired); else the snapshot
tagged ``tidb-ts-T`` (``--tag-runs``; tags outlive the expiry of the snapshots around them); otherwise
the table is reported with "no snapshot at T".

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

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from sink.errors import SinkError
from sink.iceberg import lineage
from sink.verify_report import Difference, TableResult, VerifyReport
from transform.codec.values import json_value
from transform.filters import TableFilter

FROM_TS = "binlake.from-ts"
TO_TS = "binlake.to-ts"
ROWID = "_tidb_rowid"
METADATA_COLUMNS = frozenset({"_tidb_commit_ts", "_tidb_commit_time"})
CHANGELOG_SUFFIX = "__changelog"
TAG_PREFIX = "tidb-ts-"
DEFAULT_MAX_EXAMPLES = 10

_LONG_WRAP = 1 << 64
_LONG_MAX = (1 << 63) - 1
_F32 = struct.Struct("<f")
_TEMPORAL = (DateType, TimestampType, TimestamptzType)
_SHORT_YEAR = re.compile(r"(\d{1,3})-\d\d-\d\d")
_EXP_NUMBER = re.compile(r"-?\d+(\.\d+)?[eE][-+]?\d+\Z")


class VerifyError(SinkError):
    """``verify`` could not run: a malformed upstream snapshot or an unreadable catalog/table."""


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


def comparable(ftype: IcebergType, v: Any) -> Any:
    """The comparison form of a rendered value ``v`` of a mirror column of type ``ftype``: equal
    forms mean equal values. Ints > 2^63-1 in a ``long`` wrap (BIT(64)); ints in a decimal column
    become their text (BIGINT UNSIGNED); numbers in exponent notation in a string column become plain
    notation (DECIMAL(M>38) is written as plain text, ``str(Decimal)`` may use an exponent); floats
    are rounded to float32 for ``float`` columns (NaN and infinities become their text); date/time
    text gets a 4-digit year."""
    if v is None:
        return None
    if isinstance(ftype, (IntegerType, LongType)):
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int) and v > _LONG_MAX:
            return v - _LONG_WRAP
        return v
    if isinstance(ftype, DecimalType):
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        return v
    if isinstance(ftype, _TEMPORAL) and isinstance(v, str):
        m = _SHORT_YEAR.match(v)
        return f"{int(m.group(1)):04d}{v[m.end(1):]}" if m else v
    if isinstance(ftype, StringType) and isinstance(v, str) and _EXP_NUMBER.match(v):
        return format(Decimal(v), "f")
    if isinstance(ftype, (FloatType, DoubleType)):
        f = _as_float(v)
        if f is None:
            return v
        if isinstance(ftype, FloatType) and not (math.isnan(f) or math.isinf(f)):
            try:
                f = _F32.unpack(_F32.pack(f))[0]
            except OverflowError:
                pass
        return str(f) if math.isnan(f) or math.isinf(f) else f
    return v


def same_value(ftype: IcebergType, upstream: Any, mirror: Any) -> bool:
    """True when the comparison forms (:func:`comparable`) of an upstream and a mirror value are equal."""
    if isinstance(upstream, bool) or isinstance(mirror, bool):
        return bool(upstream == mirror)
    if type(upstream) is not type(mirror) and not (
            isinstance(upstream, (int, float)) and isinstance(mirror, (int, float))):
        return False
    return bool(upstream == mirror)


def _valid_temporal(ftype: IcebergType, text: str) -> bool:
    """True when ``text`` (upstream rendering) is a date/datetime Python (hence Iceberg) can hold."""
    try:
        if isinstance(ftype, DateType):
            dt.date.fromisoformat(text)
        else:
            dt.datetime.fromisoformat(text)
        return True
    except ValueError:
        return False


def _is_nulled(ftype: IcebergType, upstream: Any, mirror: Any) -> bool:
    return (mirror is None and isinstance(upstream, str) and isinstance(ftype, _TEMPORAL)
            and not _valid_temporal(ftype, upstream))


# ---------------------------------------------------------------------------------------------
# snapshot choice

@dataclass(frozen=True)
class _Marked:
    snapshot: Snapshot
    from_ts: int
    to_ts: int


def _marked(snapshot: Snapshot) -> _Marked | None:
    summary = snapshot.summary
    if summary is None:
        return None
    props = summary.additional_properties
    try:
        return _Marked(snapshot, int(props[FROM_TS]), int(props[TO_TS]))
    except (KeyError, TypeError, ValueError):
        return None


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
    tag = table.metadata.refs.get(f"{TAG_PREFIX}{ts}")
    if choice.problem and tag is not None:
        tagged = table.metadata.snapshot_by_id(tag.snapshot_id)
        if tagged is not None:
            return SnapshotChoice(tagged, ts, note=f"the snapshot tagged {TAG_PREFIX}{ts}")
    return choice


def _along_main(table: Table, ts: int) -> SnapshotChoice:
    meta = table.metadata
    current = meta.current_snapshot()
    if current is None:
        return SnapshotChoice(None, note="the table has no snapshot yet (compared as empty)")
    marked = [m for m in (_marked(s) for s in ancestors_of(current, meta)) if m is not None]
    if not marked:
        return SnapshotChoice(None, problem=f"no snapshot at {ts}: no snapshot carries binlake markers")
    newer: _Marked | None = None
    for m in marked:                      # newest first
        if m.to_ts == ts:
            return SnapshotChoice(m.snapshot, m.to_ts)
        if m.to_ts < ts:
            if newer is None or newer.from_ts >= ts:
                return SnapshotChoice(m.snapshot, m.to_ts,
                                      note=f"not written by any run since to-ts {m.to_ts}")
            return SnapshotChoice(None, problem=(
                f"no snapshot at {ts}: it falls inside the run ({newer.from_ts}, {newer.to_ts}] "
                f"(snapshot {newer.snapshot.snapshot_id})"))
        newer = m
    oldest = marked[-1]
    # a parent, or one expired (pyiceberg then clears the id; the sequence number shows it was not the first)
    unmarked_before = oldest.snapshot.parent_snapshot_id is not None or (oldest.snapshot.sequence_number or 0) > 1
    if oldest.from_ts >= ts and not unmarked_before:
        return SnapshotChoice(None, note=f"first written by the run ({oldest.from_ts}, {oldest.to_ts}] "
                                         f"(compared as empty)")
    return SnapshotChoice(None, problem=f"no snapshot at {ts}: the oldest marked snapshot has to-ts "
                                        f"{oldest.to_ts}")


# ---------------------------------------------------------------------------------------------
# comparison

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


def _upstream_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        for c in r:
            seen.setdefault(c, None)
    return list(seen)


class _Examples:
    """Up to ``limit`` examples of each kind (callers ask :meth:`wants` before building one)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.by_kind: dict[str, list[Difference]] = {}

    def wants(self, kind: str) -> bool:
        """True while fewer than ``limit`` examples of ``kind`` are kept."""
        return len(self.by_kind.get(kind, ())) < self.limit

    def add(self, example: Difference) -> None:
        self.by_kind.setdefault(example.kind, []).append(example)

    def all(self) -> list[Difference]:
        out: list[Difference] = []
        for kind in ("missing", "extra", "differing", "duplicate"):
            out.extend(self.by_kind.get(kind, []))
        return out


def _compare(result: TableResult, upstream: Sequence[Mapping[str, Any]], schema: Schema,
             mirror_cols: dict[str, list[Any]], mirror_len: int, keys: list[str], max_examples: int) -> None:
    """Fill ``result`` with the key-by-key comparison of rendered upstream rows and mirror columns."""
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
        return
    up_set = set(up_cols)
    common = [c for c in data_cols if c in up_set] if upstream else data_cols
    ex = _Examples(max_examples)

    # a key is the tuple of its columns' comparison forms (mirror_cols already holds those)
    up_by_key: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in upstream:
        k = tuple(comparable(types[c], row.get(c)) for c in keys)
        if k in up_by_key:
            result.duplicates += 1
            if ex.wants("duplicate"):
                ex.add(Difference("duplicate", dict(zip(keys, k)), side="upstream"))
            continue
        up_by_key[k] = row

    mirror_by_key: dict[tuple[Any, ...], int] = {}
    for i in range(mirror_len):
        k = tuple(mirror_cols[c][i] for c in keys)
        if k in mirror_by_key:
            result.duplicates += 1
            if ex.wants("duplicate"):
                ex.add(Difference("duplicate", dict(zip(keys, k)), side="mirror"))
            continue
        mirror_by_key[k] = i

    for k, row in up_by_key.items():
        at = mirror_by_key.get(k)
        if at is None:
            result.missing += 1
            if ex.wants("missing"):
                ex.add(Difference("missing", dict(zip(keys, k)), row=dict(row)))
            continue
        result.compared += 1
        diff: dict[str, tuple[Any, Any]] = {}
        for c in common:
            t = types[c]
            up = comparable(t, row.get(c))
            mi = mirror_cols[c][at]
            if same_value(t, up, mi):
                continue
            if _is_nulled(t, up, mi):
                result.nulled += 1
                continue
            diff[c] = (row.get(c), mi)
        if diff:
            result.differing += 1
            if ex.wants("differing"):
                ex.add(Difference("differing", dict(zip(keys, k)), diff))
    for k, i in mirror_by_key.items():
        if k not in up_by_key:
            result.extra += 1
            if ex.wants("extra"):
                ex.add(Difference("extra", dict(zip(keys, k)), row={c: mirror_cols[c][i] for c in data_cols}))
    result.examples = ex.all()


def _load(catalog: Catalog, name: str) -> Table | None:
    db, _, tbl = name.partition(".")
    try:
        return catalog.load_table((db, tbl))
    except (NoSuchTableError, NoSuchNamespaceError):
        return None
    except Exception as e:  # pyiceberg/SQLAlchemy/IO errors
        raise VerifyError(f"cannot load the mirror table {name}: {e}") from e


def verify_table(catalog: Catalog, name: str, upstream: Sequence[Mapping[str, Any]], ts: int,
                 max_examples: int = DEFAULT_MAX_EXAMPLES, mirror: str | None = None) -> TableResult:
    """Compare one upstream table's rendered rows with its mirror ``name`` at upstream ``ts``; ``mirror``
    names the Iceberg table holding it now when it was renamed or dropped after ``ts``."""
    result = TableResult(name, upstream_rows=len(upstream))
    if mirror and mirror.lower() != name.lower():
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
                    and table.properties.get("binlake.to-ts") == str(ts)):
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
    mirror_cols: dict[str, list[Any]] = {}
    for f in schema.fields:
        values = arrow.column(f.name).to_pylist() if f.name in arrow.column_names else [None] * arrow.num_rows
        mirror_cols[f.name] = [comparable(f.field_type, json_value(v)) for v in values]
    _compare(result, upstream, schema, mirror_cols, arrow.num_rows, keys, max_examples)
    return result


def _check_snapshot(upstream_snapshot: object) -> None:
    if not isinstance(upstream_snapshot, Mapping):
        raise VerifyError(f"the upstream snapshot must map 'db.table' to rows, got {type(upstream_snapshot).__name__}")
    for name, rows in upstream_snapshot.items():
        if not isinstance(name, str) or "." not in name or name.startswith(".") or name.endswith("."):
            raise VerifyError(f"upstream snapshot: table name {name!r} is not 'db.table'")
        if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
            raise VerifyError(f"upstream snapshot: {name} must be a list of row objects")


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
                   allows: Callable[[str, str], bool] | None = None) -> VerifyReport:
    """Compare every table of ``upstream_snapshot`` (the upstream at ``ts``, values rendered as by
    ``/binlake/snapshot``) with its mirror ``db.table`` in ``catalog`` at the snapshot marked
    ``binlake.to-ts = ts``, key by key.

    ``tables`` (``db.table`` names, case-insensitive) limits the comparison; ``allows(db, table)``
    (default: TiDB Binlog's ``ignore-schemas`` defaults, e.g. ``TableFilter.allows``) drops tables the
    drain does not replicate. Left-out tables are listed in ``skipped``; changelog tables are never
    compared. Raises :class:`VerifyError` for a malformed snapshot or an unreadable mirror.
    """
    _check_snapshot(upstream_snapshot)
    allows = allows or TableFilter().allows
    moved = lineage.moves(_meta_properties(catalog))
    wanted = {t.lower() for t in tables} if tables is not None else None
    report = VerifyReport(ts)
    upstream_names = {n.lower() for n in upstream_snapshot}
    if wanted is not None:
        report.unmatched = sorted(t for t in tables or [] if t.lower() not in upstream_names)
    for name in sorted(upstream_snapshot):
        db, _, tbl = name.partition(".")
        if (wanted is not None and name.lower() not in wanted) or not allows(db, tbl) \
                or tbl.endswith(CHANGELOG_SUFFIX):
            report.skipped.append(name)
            continue
        held_by = lineage.name_at(moved, name, ts)[0]
        report.tables.append(verify_table(catalog, name, upstream_snapshot[name], ts, max_examples, held_by))
    return report


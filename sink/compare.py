"""The comparison behind ``binlake verify``, whatever holds the copy of the upstream: its rows at a ts
against the upstream's rows at that ts, key by key, into ``sink.verify_report`` results.

A reader per side brings the copy's rows and its :class:`ValueRules` (how its values match the
upstream's rendering, ``transform.codec.values.json_value``): the Iceberg mirrors
(``sink.iceberg.verify``) and a MySQL downstream (``sink.mysql.verify``). :func:`compare_rows` matches
the rows of one table by key and fills its :class:`~sink.verify_report.TableResult`: a key held by
several rows of one side is a duplicate (the first row is compared), a key on one side only is a
missing or an extra row, a key on both sides is compared column by column, where a value the copy
holds as NULL because it cannot hold the upstream's (a zero date) counts as *nulled*, not as a
difference. A table without a key (``multiset``) is matched by whole rows: equal rows must repeat as
often on both sides. Up to ``max_examples`` examples of each kind are kept, listed missing, extra,
differing, duplicate. :func:`compare_tables` runs a reader over every table of an upstream snapshot.

Needs no Iceberg library: verifying a MySQL downstream runs where pyiceberg is not installed.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sink.errors import SinkError
from sink.verify_report import Difference, TableResult, VerifyReport

DEFAULT_MAX_EXAMPLES = 10
Row = Mapping[str, Any]
Key = tuple[Any, ...]
Expired = Callable[[Row], bool]   # a row of the copy the upstream's TTL had expired at the ts
_KINDS = ("missing", "extra", "differing", "duplicate")


class VerifyError(SinkError):
    """``verify`` could not run: a malformed upstream snapshot or an unreadable copy."""


class ValueRules:
    """How a copy's values compare with the upstream's rendered values; by default, as they are."""

    def upstream_key(self, row: Row, keys: Sequence[str]) -> Key:
        """The key of an upstream row, in the form keys of both sides are matched in."""
        return tuple(row.get(k) for k in keys)

    def copy_key(self, row: Row, keys: Sequence[str]) -> Key:
        """The key of a row of the copy, in the same form."""
        return self.upstream_key(row, keys)

    def same(self, column: str, upstream: Any, copy: Any) -> bool:
        """True when the copy's value of ``column`` is the upstream's."""
        return bool(upstream == copy)

    def nulled(self, column: str, upstream: Any, copy: Any) -> bool:
        """True when the copy holds NULL for an upstream value it cannot hold (not a difference)."""
        return False


class _Examples:
    """Up to ``limit`` examples of each kind (callers ask :meth:`wants` before building one)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.by_kind: dict[str, list[Difference]] = {}

    def wants(self, kind: str) -> bool:
        """True while fewer than ``limit`` examples of ``kind`` are kept."""
        return len(self.by_kind.get(kind, ())) < self.limit

    def add(self, kind: str, key: Key, keys: Sequence[str], **details: Any) -> None:
        if self.wants(kind):
            self.by_kind.setdefault(kind, []).append(Difference(kind, dict(zip(keys, key)), **details))

    def all(self) -> list[Difference]:
        return [e for kind in _KINDS for e in self.by_kind.get(kind, [])]


def _index(result: TableResult, examples: _Examples, rows: Sequence[Row], key: Callable[[Row], Key],
           keys: Sequence[str], side: str, multiset: bool) -> tuple[dict[Key, Row], Counter[Key]]:
    """Each key's first row and how many rows hold it; a key held twice is a duplicate unless ``multiset``."""
    first: dict[Key, Row] = {}
    count: Counter[Key] = Counter()
    for row in rows:
        k = key(row)
        count[k] += 1
        if k not in first:
            first[k] = row
        elif not multiset:
            result.duplicates += 1
            examples.add("duplicate", k, keys, side=side)
    return first, count


def compare_rows(result: TableResult, keys: Sequence[str], columns: Sequence[str], upstream: Sequence[Row],
                 copy: Sequence[Row], rules: ValueRules, max_examples: int = DEFAULT_MAX_EXAMPLES,
                 multiset: bool = False, expired: Expired | None = None) -> None:
    """Fill ``result`` with the comparison of one table's ``upstream`` rows and the ``copy``'s rows
    (see the module doc): matched by ``keys``, matched rows compared on ``columns``. Examples show the
    upstream's value beside the copy's as each side's rows hold them. A row only the copy holds that
    ``expired`` says the upstream's TTL had expired (TiDB's TTL job deletes without binlogs) is
    counted as ``expired``, not as extra."""
    ex = _Examples(max_examples)
    up, up_n = _index(result, ex, upstream, lambda r: rules.upstream_key(r, keys), keys, "upstream", multiset)
    down, down_n = _index(result, ex, copy, lambda r: rules.copy_key(r, keys), keys, "mirror", multiset)
    if multiset:
        for k in up_n.keys() & down_n.keys():
            if up_n[k] != down_n[k]:
                kind = "missing" if up_n[k] > down_n[k] else "extra"
                setattr(result, kind, getattr(result, kind) + abs(up_n[k] - down_n[k]))
                ex.add(kind, k, keys, row=dict(up[k]))
    for k, row in up.items():
        other = down.get(k)
        if other is None:
            result.missing += up_n[k] if multiset else 1
            ex.add("missing", k, keys, row=dict(row))
            continue
        result.compared += 1
        diff: dict[str, tuple[Any, Any]] = {}
        for c in columns:
            u, d = row.get(c), other.get(c)
            if rules.same(c, u, d):
                continue
            if rules.nulled(c, u, d):
                result.nulled += 1
                continue
            diff[c] = (u, d)
        if diff:
            result.differing += 1
            ex.add("differing", k, keys, columns=diff)
    for k, other in down.items():
        if k not in up and expired is not None and expired(other):
            result.expired += down_n[k] if multiset else 1
        elif k not in up:
            result.extra += down_n[k] if multiset else 1
            ex.add("extra", k, keys, row=dict(other))
    result.examples = ex.all()


def check_snapshot(upstream_snapshot: object) -> None:
    """:class:`VerifyError` unless ``upstream_snapshot`` maps ``db.table`` names to lists of rows."""
    if not isinstance(upstream_snapshot, Mapping):
        raise VerifyError(f"the upstream snapshot must map 'db.table' to rows, got {type(upstream_snapshot).__name__}")
    for name, rows in upstream_snapshot.items():
        if not isinstance(name, str) or "." not in name or name.startswith(".") or name.endswith("."):
            raise VerifyError(f"upstream snapshot: table name {name!r} is not 'db.table'")
        if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
            raise VerifyError(f"upstream snapshot: {name} must be a list of row objects")


def compare_tables(upstream_snapshot: Mapping[str, Sequence[Row]], ts: int,
                   compare: Callable[[str, Sequence[Row]], TableResult], allows: Callable[[str, str], bool],
                   tables: Sequence[str] | None = None) -> VerifyReport:
    """Every table of ``upstream_snapshot`` (the upstream at ``ts``) that ``allows(db, table)`` and, when
    given, ``tables`` (``db.table``, case-insensitive) name, compared by ``compare(name, rows)``; the
    others are listed in ``skipped``, requested tables absent upstream in ``unmatched``. Raises
    :class:`VerifyError` for a malformed snapshot."""
    check_snapshot(upstream_snapshot)
    wanted = {t.lower() for t in tables} if tables is not None else None
    report = VerifyReport(ts)
    if wanted is not None:
        present = {n.lower() for n in upstream_snapshot}
        report.unmatched = sorted(t for t in tables or [] if t.lower() not in present)
    for name in sorted(upstream_snapshot):
        db, _, tbl = name.partition(".")
        if (wanted is not None and name.lower() not in wanted) or not allows(db, tbl):
            report.skipped.append(name)
            continue
        report.tables.append(compare(name, upstream_snapshot[name]))
    return report

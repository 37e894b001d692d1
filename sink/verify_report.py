"""What ``binlake verify`` reports, for either downstream (Iceberg mirrors, a MySQL database): per
table counts, problems and example differences, as text and JSON. Needs no Iceberg library, so
verifying a MySQL downstream runs where pyiceberg is not installed."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Difference:
    """One example difference: ``kind`` is ``missing`` (only upstream; ``row`` is the upstream row),
    ``extra`` (only in the mirror; ``row`` is the mirror row), ``differing`` (``columns`` maps each
    differing column to its (upstream, mirror) renderings) or ``duplicate`` (a key held by more than
    one row on ``side``, ``"upstream"`` or ``"mirror"``)."""

    kind: str
    key: dict[str, Any]
    columns: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    row: dict[str, Any] | None = None
    side: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        out: dict[str, Any] = {"kind": self.kind, "key": dict(self.key)}
        if self.columns:
            out["columns"] = {c: {"upstream": u, "mirror": m} for c, (u, m) in self.columns.items()}
        if self.row is not None:
            out["row"] = dict(self.row)
        if self.side:
            out["side"] = self.side
        return out

    def format(self) -> str:
        """One line (or a few) of text."""
        key = ", ".join(f"{k}={v!r}" for k, v in self.key.items())
        if self.kind == "differing":
            cols = "; ".join(f"{c}: upstream {u!r} != mirror {m!r}" for c, (u, m) in self.columns.items())
            return f"differing  {key}: {cols}"
        if self.kind == "duplicate":
            where = "upstream" if self.side == "upstream" else "in the mirror"
            return f"duplicate  {key} (several rows {where})"
        return f"{self.kind:<10} {key}" + (f": {self.row}" if self.row else "")


@dataclass
class TableResult:
    """The comparison of one upstream table with its mirror."""

    table: str
    snapshot_id: int | None = None
    to_ts: int | None = None
    upstream_rows: int = 0
    mirror_rows: int = 0
    compared: int = 0       # keys present on both sides, compared column by column
    missing: int = 0        # keys only upstream
    extra: int = 0          # keys only in the mirror
    differing: int = 0      # compared keys with at least one differing column
    nulled: int = 0         # values: an upstream zero/invalid date held as NULL by the mirror
    duplicates: int = 0     # keys held by more than one row on one side
    expired: int = 0        # keys only in the mirror that the upstream's TTL had expired (deleted without binlogs)
    problems: list[str] = field(default_factory=list)   # table-level differences
    notes: list[str] = field(default_factory=list)      # informational
    examples: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the mirror holds exactly the upstream rows (nulled dates allowed)."""
        return not (self.problems or self.missing or self.extra or self.differing or self.duplicates)

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "table": self.table, "ok": self.ok, "snapshot_id": self.snapshot_id, "to_ts": self.to_ts,
            "upstream_rows": self.upstream_rows, "mirror_rows": self.mirror_rows,
            "compared": self.compared, "missing": self.missing, "extra": self.extra,
            "differing": self.differing, "nulled": self.nulled, "duplicates": self.duplicates,
            "expired": self.expired,
            "problems": list(self.problems), "notes": list(self.notes),
            "examples": [e.to_json() for e in self.examples],
        }


@dataclass
class VerifyReport:
    """Every compared table at one upstream ts; ``ok`` when none differs."""

    ts: int
    tables: list[TableResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)     # upstream tables left out by filters
    unmatched: list[str] = field(default_factory=list)   # requested tables absent upstream at ts

    @property
    def ok(self) -> bool:
        """True when every compared table matches."""
        return all(t.ok for t in self.tables)

    def table(self, name: str) -> TableResult:
        """The result for ``db.table``; ``KeyError`` when it was not compared."""
        for t in self.tables:
            if t.table == name:
                return t
        raise KeyError(name)

    def format(self) -> str:
        """The text the CLI prints: one line per table, then its problems and example differences."""
        bad = [t for t in self.tables if not t.ok]
        head = (f"verify at ts {self.ts}: {len(self.tables)} table(s) compared, "
                + ("no differences" if not bad else f"{len(bad)} with differences"))
        lines = [head]
        width = max((len(t.table) for t in self.tables), default=0)
        for t in self.tables:
            snap = f"snapshot {t.snapshot_id} (to-ts {t.to_ts})" if t.snapshot_id is not None else "snapshot -"
            counts = (f"rows {t.upstream_rows}/{t.mirror_rows}  compared {t.compared}  missing {t.missing}  "
                      f"extra {t.extra}  differing {t.differing}  nulled {t.nulled}")
            if t.duplicates:
                counts += f"  duplicates {t.duplicates}"
            lines.append(f"  {'OK  ' if t.ok else 'DIFF'} {t.table:<{width}}  {snap}  {counts}")
            lines.extend(f"         ! {p}" for p in t.problems)
            lines.extend(f"         - {n}" for n in t.notes)
            if t.expired:
                lines.append(f"         - {t.expired} expired by the table's TTL at the ts and gone upstream "
                             f"(TiDB's TTL job deletes without binlogs): not counted as extra")
            lines.extend(f"         {e.format()}" for e in t.examples)
        if self.skipped:
            lines.append(f"  skipped (filtered out): {', '.join(self.skipped)}")
        if self.unmatched:
            lines.append(f"  not upstream at ts {self.ts}: {', '.join(self.unmatched)}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {"ts": self.ts, "ok": self.ok, "tables": [t.to_json() for t in self.tables],
                "skipped": list(self.skipped), "unmatched": list(self.unmatched)}

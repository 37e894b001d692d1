"""Where an upstream table's Iceberg tables went after RENAME TABLE and DROP TABLE.

The Iceberg sink renames a table's Iceberg tables with it and, at DROP TABLE, keeps the mirror as
``<table>__dropped_<commit_ts>`` (and the changelog as ``<table>__changelog_dropped_<commit_ts>``).
Each such move is recorded in the ``_binlake`` namespace properties (``lineage.<commit_ts>.<db.table>``
→ a JSON object), so ``verify --ts T`` finds the mirror of what was called ``db.table`` at ``T``,
whatever it is called now.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

META_NAMESPACE = "_binlake"
LINEAGE_PREFIX = "lineage."
MIRROR_DROPPED_INFIX = "__dropped_"
RENAME, DROP = "rename", "drop"


@dataclass(frozen=True)
class Move:
    """At upstream ``ts`` the mirror of ``old`` (``db.table``) became the Iceberg table ``new``."""

    ts: int
    old: str
    new: str
    kind: str

    def to_property(self) -> tuple[str, str]:
        """The namespace property recording this move (the same key when recorded again)."""
        return (f"{LINEAGE_PREFIX}{self.ts}.{self.old.lower()}",
                json.dumps({"ts": self.ts, "from": self.old, "to": self.new, "kind": self.kind}))


def dropped_mirror(name: str, drop_ts: int) -> str:
    """The name a dropped table's mirror is kept under."""
    return f"{name}{MIRROR_DROPPED_INFIX}{drop_ts}"


def moves(properties: Mapping[str, str]) -> list[Move]:
    """The moves recorded in the ``_binlake`` namespace ``properties`` (malformed entries ignored)."""
    out = []
    for key, value in properties.items():
        if not key.startswith(LINEAGE_PREFIX):
            continue
        try:
            obj = json.loads(value)
            out.append(Move(int(obj["ts"]), str(obj["from"]), str(obj["to"]), str(obj["kind"])))
        except (ValueError, TypeError, KeyError):
            continue
    return sorted(out, key=lambda m: m.ts)


def name_at(recorded: list[Move], name: str, ts: int) -> tuple[str, list[Move]]:
    """The Iceberg table (``db.table``) now holding the mirror of what was called ``name`` at upstream
    ``ts``, and the moves after ``ts`` that led there (none: it is still ``name``)."""
    current, at = name, ts
    path: list[Move] = []
    while True:
        nxt = next((m for m in recorded if m.ts > at and m.old.lower() == current.lower()), None)
        if nxt is None:
            return current, path
        path.append(nxt)
        current, at = nxt.new, nxt.ts

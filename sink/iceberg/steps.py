"""A table transaction's schema and spec updates as data: recorded while the sink plans (against a
transaction it never commits), replayed by the executor on the transaction it commits.

A :class:`SchemaUpdate` is one ``update_schema()`` block (its edits in order); a :class:`SpecUpdate`
one ``update_spec()`` block (the bucket field removed, or a bucket field added). :func:`replay`
applies them in order; the planner's edits went through pyiceberg's own checks already.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from pyiceberg.table import Transaction
from pyiceberg.table.update.schema import UpdateSchema
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import IcebergType

Path = str | tuple[str, ...]


@dataclass(frozen=True)
class SchemaEdit:
    """One call on pyiceberg's ``UpdateSchema``: ``op`` with its arguments."""

    op: str                                     # add_column, delete_column, rename_column, update_column,
                                                # set_identifier_fields
    args: tuple[object, ...]
    required: bool | None = None                # update_column's
    field_type: IcebergType | None = None       # update_column's

    def apply(self, update: UpdateSchema) -> None:
        if self.op == "update_column":
            path = self.args[0]
            assert isinstance(path, (str, tuple))
            update.update_column(path, field_type=self.field_type, required=self.required)
        else:
            getattr(update, self.op)(*self.args)

    def __str__(self) -> str:
        shown = [".".join(a) if isinstance(a, tuple) else str(a) for a in self.args]
        extra = [f"{k}={v}" for k, v in (("type", self.field_type), ("required", self.required)) if v is not None]
        return f"{self.op}({', '.join(shown + extra)})"


@dataclass(frozen=True)
class SchemaUpdate:
    """One ``update_schema()`` block of the transaction."""

    edits: tuple[SchemaEdit, ...]
    allow_incompatible: bool = False


@dataclass(frozen=True)
class SpecUpdate:
    """One ``update_spec()`` block: ``remove`` the named partition field, or ``add`` ``bucket(n, column)``
    as (column, n, field name)."""

    remove: str | None = None
    add: tuple[str, int, str] | None = None


Update = SchemaUpdate | SpecUpdate


class Recorder:
    """An ``UpdateSchema`` stand-in for ``sink.iceberg.schema``'s evolution: every edit goes on to the
    real one (which checks it) and is kept as a :class:`SchemaEdit`."""

    def __init__(self, update: UpdateSchema) -> None:
        self._update = update
        self.edits: list[SchemaEdit] = []

    def add_column(self, path: Path, field_type: IcebergType) -> None:
        self._update.add_column(path, field_type)
        self.edits.append(SchemaEdit("add_column", (path, field_type)))

    def delete_column(self, path: Path) -> None:
        self._update.delete_column(path)
        self.edits.append(SchemaEdit("delete_column", (path,)))

    def rename_column(self, path_from: Path, new_name: str) -> None:
        self._update.rename_column(path_from, new_name)
        self.edits.append(SchemaEdit("rename_column", (path_from, new_name)))

    def update_column(self, path: Path, field_type: IcebergType | None = None, required: bool | None = None) -> None:
        self._update.update_column(path, field_type=field_type, required=required)
        self.edits.append(SchemaEdit("update_column", (path,), required=required, field_type=field_type))

    def set_identifier_fields(self, *fields: str) -> None:
        self._update.set_identifier_fields(*fields)
        self.edits.append(SchemaEdit("set_identifier_fields", tuple(fields)))


class Planned:
    """The updates made on a planning transaction, in order (see the module doc)."""

    def __init__(self, tx: Transaction) -> None:
        self.tx = tx
        self.updates: list[Update] = []

    @contextmanager
    def schema(self, allow_incompatible: bool = False) -> Iterator[Recorder]:
        """An ``update_schema()`` block whose edits are recorded (nothing recorded when none is made)."""
        with self.tx.update_schema(allow_incompatible_changes=allow_incompatible) as update:
            rec = Recorder(update)
            yield rec
        if rec.edits:
            self.updates.append(SchemaUpdate(tuple(rec.edits), allow_incompatible))

    def spec(self, step: SpecUpdate) -> None:
        apply_spec(self.tx, step)
        self.updates.append(step)


def apply_spec(tx: Transaction, step: SpecUpdate) -> None:
    with tx.update_spec() as update:
        if step.remove is not None:
            update.remove_field(step.remove)
        if step.add is not None:
            column, n, name = step.add
            update.add_field(column, BucketTransform(n), name)


def replay(tx: Transaction, updates: Sequence[Update]) -> None:
    """Apply planned ``updates`` to ``tx`` in order."""
    for u in updates:
        if isinstance(u, SpecUpdate):
            apply_spec(tx, u)
            continue
        with tx.update_schema(allow_incompatible_changes=u.allow_incompatible) as update:
            for edit in u.edits:
                edit.apply(update)

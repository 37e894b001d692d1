"""A table's commit: its staged transaction (``sink.iceberg.execute``) completed with what the Spark
pass wrote, in one Iceberg commit.

- A changelog appends its new files; a mirror removes the files its merge replaced (every file after
  a TRUNCATE), the delete files it folded into a new one, and the position delete files that applied
  to removed files alone, and adds the new data and delete files, in one overwrite
  (``pyiceberg_adapter.commit_files``; an append when it only adds data files).
- Every snapshot carries the run markers, and the table records ``binlake.to-ts`` in the same
  transaction (a re-run skips it).
- The transaction was staged before the pass against the table as it was then, and binlake's
  tables turn pyiceberg's commit retries off: when another run (or a compaction) committed to the
  table meanwhile, the catalog refuses the commit and this raises :class:`ConcurrentRunError`; none
  of this run's files are committed to that table and the next run takes what is left.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile

from sink import changelog as fmt
from sink.errors import SinkError
from sink.iceberg import position_deletes as deletes
from sink.iceberg import schema as ks
from sink.iceberg.pyiceberg_adapter import commit_files
from transform import changes as ch
from transform import failpoints

if TYPE_CHECKING:
    from sink.iceberg.execute import Staged, Written


class ConcurrentRunError(SinkError):
    """Another run committed to the table while this one wrote it; this run leaves the table alone
    (its files are never committed), and a re-run takes only what the other did not (transient)."""

    transient = True


def commit(staged: Staged, written: Written, run: ch.RunBatch) -> None:
    """Complete and commit ``staged`` (see the module doc); its staging error, if it was refused."""
    if staged.error is not None:
        raise staged.error
    tx = staged.tx
    try:
        new = written.files
        if staged.reset:
            gone = list(staged.files)
        else:
            replaced = set(written.removed)
            known = {d.file_path: d for ds in staged.deletes.values() for d in ds}
            gone = [f for f in staged.files if f.file_path in replaced]
            gone += [known[p] for p in sorted(replaced & set(known))]   # delete files a merge folded
        listed = {g.file_path for g in gone}
        gone += [d for d in _deletes_of(staged, gone) if d.file_path not in listed]
        if gone or any(deletes.is_delete(f) for f in new):
            commit_files(tx, run.markers(), new, gone)
        elif new:
            with tx.update_snapshot(snapshot_properties=run.markers()).fast_append() as append:
                for f in new:
                    append.append_data_file(f)
        props = ks.table_properties(staged.info, staged.version)
        props[fmt.TO_TS_KEY] = str(run.to_ts)
        tx.set_properties(props)
        failpoints.inject("sink-before-commit", staged.name)
        tx.commit_transaction()
    except CommitFailedException as e:
        raise ConcurrentRunError(f"table {staged.name}: another run committed to it while this run wrote "
                                 f"({run.from_ts}, {run.to_ts}]: concurrent run; nothing of this run was "
                                 f"committed to it, a re-run takes what is left ({e})") from e


def _deletes_of(staged: Staged, gone: list[DataFile]) -> list[DataFile]:
    """The delete files that go with the data files ``gone``: those that applied to none but them
    (every one after a reset)."""
    paths = {f.file_path for f in gone}
    applies: dict[str, set[str]] = {}
    files: dict[str, DataFile] = {}
    for data_path, ds in staged.deletes.items():
        for d in ds:
            applies.setdefault(d.file_path, set()).add(data_path)
            files[d.file_path] = d
    return [files[p] for p, targets in applies.items() if staged.reset or targets <= paths]


def tag(catalog: Catalog, ident: tuple[str, ...], to_ts: int) -> None:
    """Tag the table's current snapshot ``tidb-ts-<to_ts>`` (time travel by upstream ts)."""
    tbl = catalog.load_table(ident)
    name = fmt.tag_name(to_ts)
    snap = tbl.current_snapshot()
    if snap is not None and name not in tbl.metadata.refs:
        tbl.manage_snapshots().create_tag(snap.snapshot_id, name).commit()

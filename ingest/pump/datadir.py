"""Opening a pump's data directory: what goes wrong there is said in one line with what to do.

A full disk, a directory the pump cannot write, a data directory of another cluster and a corrupted
LevelDB index each raise a named error (:class:`~ingest.errors.DiskFull`,
:class:`~ingest.errors.DataDirError`) instead of LevelDB's or the OS's traceback. The cluster a
data directory belongs to is recorded in its ``.cluster`` file at the first start.
"""
from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import plyvel

from ingest.errors import DataDirError, DiskFull

CLUSTER_FILE = ".cluster"
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.EISDIR)


def _free(path: Path) -> str:
    for p in (path, *path.parents):
        try:
            return f"{shutil.disk_usage(p).free:,} bytes free"
        except OSError:
            continue
    return "free space unknown"


def _text(e: BaseException) -> str:
    """An error's message (LevelDB's come as bytes)."""
    first = e.args[0] if e.args else e
    return first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)


def _full(data_dir: Path) -> DiskFull:
    return DiskFull(f"data dir {data_dir}: the disk is full ({_free(data_dir)}); free space on that file system "
                    f"and start the pump again (nothing stored is lost)")


@contextmanager
def opening(data_dir: Path) -> Iterator[None]:
    """Turn the OS's and LevelDB's errors while the data directory opens into one-line named errors
    (LevelDB's first: plyvel's IOError is an OSError without an errno)."""
    try:
        yield
    except plyvel.CorruptionError as e:
        kv = data_dir / "kv"
        raise DataDirError(f"the index {kv} is corrupted ({_text(e)}); move it aside (mv {kv} {kv}.corrupt) "
                           f"and start again: the pump rebuilds it from the value log") from None
    except plyvel.IOError as e:
        if "No space left" in _text(e):
            raise _full(data_dir) from None
        raise DataDirError(f"the index {data_dir / 'kv'} cannot be opened: {_text(e)}") from None
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise _full(data_dir) from None
        if e.errno in _UNWRITABLE:
            raise DataDirError(f"data dir {data_dir} is not writable ({e.strerror}: {e.filename}); give the pump "
                               f"a directory it can write (data-dir) or fix its permissions") from None
        raise


def check_cluster(data_dir: Path, cluster_id: int) -> None:
    """Refuse a data directory recorded for another cluster; record ``cluster_id`` in a new one."""
    marker = data_dir / CLUSTER_FILE
    try:
        recorded = marker.read_text().strip()
    except FileNotFoundError:
        with opening(data_dir):
            marker.write_text(f"{cluster_id}\n")
        return
    if recorded and recorded != str(cluster_id):
        raise DataDirError(f"data dir {data_dir} holds binlogs of cluster {recorded}, but PD (pd-urls) says this "
                           f"is cluster {cluster_id}: point data-dir at this cluster's directory or an empty one")

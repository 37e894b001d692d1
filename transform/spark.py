"""The Spark session a Drainer run executes on.

Settings, lowest priority first:

1. ``STACK_SETTINGS`` (every master): what the drain's stages rely on — Arrow transfers between
   the JVM and Python, Arrow batches of at most 65,536 rows and 64 MiB, reused Python workers.
2. ``LOCAL_DEFAULTS`` (``local[...]`` masters only): sized for one machine — 4 shuffle partitions
   and default parallelism, a 4 GB driver, adaptive execution off (predictable partitions), no UI,
   the driver bound to 127.0.0.1. A cluster master gets Spark's (or the cluster's) defaults instead.
3. ``conf``: drainer.toml's ``[spark.conf]`` and every ``--spark-conf KEY=VALUE``, verbatim.

The driver's JVM maps a class-data sharing archive of Spark's classes when binlake has built one
(``transform.spark_archive``; ``[spark] class-archive = false`` turns it off).

Python workers run ``spark.pyspark.python`` when given, else ``$PYSPARK_PYTHON``, else (local
masters) this interpreter; the process environment is not changed.

On a cluster master the executors need binlake's own code: the session ships the packages its
tasks import (``SHIPPED``) as one zip through ``addPyFile``. Their third-party libraries (pyarrow,
pyiceberg, grpcio, numpy, protobuf) must be installed where ``spark.pyspark.python`` points, or come
as a packed environment through ``spark.archives`` (README, "The Drainer on a cluster").
"""
from __future__ import annotations

import importlib
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa
from pyspark import SparkContext, StorageLevel
from pyspark.sql import DataFrame, SparkSession

from transform.spark_archive import java_options

_SPARK_TYPES = {pa.int32(): "int", pa.int64(): "long", pa.string(): "string", pa.binary(): "binary"}

STACK_SETTINGS: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
    # rows here are whole transactions and segment blobs (tens of KB each): 65,536 of them would make
    # one Arrow batch of gigabytes in the JVM; batches close at 64 MiB instead
    "spark.sql.execution.arrow.maxBytesPerBatch": str(64 << 20),
    "spark.python.worker.reuse": "true",
}
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.driver.memory": "4g",
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"

SHIPPED = ("ingest", "transform", "sink", "schemas")   # the packages Spark tasks import
_shipped: dict[str, Path] = {}


def code_zip() -> Path:
    """A zip of the ``SHIPPED`` packages' Python files, built once per process."""
    if "zip" not in _shipped:
        path = Path(tempfile.mkdtemp(prefix="binlake-code-")) / "binlake-code.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            for name in SHIPPED:
                root = Path(importlib.import_module(name).__file__ or "").parent
                for f in sorted(root.rglob("*.py")):
                    zf.write(f, f"{name}/{f.relative_to(root).as_posix()}")
        _shipped["zip"] = path
    return _shipped["zip"]


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL string (``mapInArrow``'s output schema) of an Arrow schema of simple columns."""
    return ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}{'' if f.nullable else ' not null'}" for f in schema)


def is_local(master: str) -> bool:
    """True for ``local``, ``local[N]``, ``local[*]`` and ``local[N,F]`` masters."""
    return master == "local" or master.startswith("local[")


def session_settings(master: str, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every setting :func:`spark_session` gives Spark for ``master`` (see the module doc)."""
    settings = dict(STACK_SETTINGS)
    if is_local(master):
        settings.update(LOCAL_DEFAULTS)
        settings["spark.ui.showConsoleProgress"] = "true" if sys.stderr.isatty() else "false"
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    return settings


_SECRET = ("secret", "password", "token", "credential")


def settings_in_force(spark: SparkSession, master: str, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The values the live session holds for every key :func:`session_settings` set (secret-looking
    keys shown as ``<redacted>``): what a run report records."""
    out = {}
    for key in session_settings(master, conf):
        value = spark.conf.get(key, None)
        if value is not None:
            out[key] = "<redacted>" if any(word in key.lower() for word in _SECRET) else value
    return out


def with_class_archive(settings: Mapping[str, str], archive: Callable[[], str]) -> dict[str, str]:
    """``settings`` with the driver's Java options of the class-data archive (``archive()``) added,
    unless they name an archive or ``-Xshare`` themselves."""
    out = dict(settings)
    options = out.get(DRIVER_JAVA_OPTIONS, "")
    if not any(flag in options for flag in ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")):
        flags = archive()
        if flags:
            out[DRIVER_JAVA_OPTIONS] = f"{options} {flags}".strip()
    return out


def spark_session(master: str = "local[*]", app_name: str = "binlake-drain",
                  conf: Mapping[str, str] | None = None, class_archive: bool = True) -> SparkSession:
    """A SparkSession on ``master`` with :func:`session_settings`; an existing session of this
    process is reused (Spark allows one per process: settings fixed at its start stay). With
    ``class_archive`` the driver's JVM maps binlake's class-data archive of Spark
    (``transform.spark_archive``), unless ``spark.driver.extraJavaOptions`` already names one."""
    settings = session_settings(master, conf)
    if class_archive and SparkContext._active_spark_context is None:
        settings = with_class_archive(settings, java_options)
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    python = settings.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
    if python or is_local(master):
        spark.sparkContext.pythonExec = python or sys.executable
    if not is_local(master) and "added" not in _shipped:
        spark.sparkContext.addPyFile(str(code_zip()))
        _shipped["added"] = code_zip()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def kept_on_disk(frame: DataFrame) -> tuple[DataFrame, Callable[[], None]]:
    """``frame`` computed now and kept on the executors' local disks (Spark's local checkpoint, not a
    sink's checkpoint), and a function that deletes it.

    Disk only: cached in the JVM heap, a range larger than the heap's storage share ran a 1 GB driver
    out of memory while spilling (10M changes). The function is needed because
    ``DataFrame.unpersist`` does not delete a local checkpoint (it only knows the cache): its blocks
    would stay until the JVM's garbage collector finds them gone — for a follower, every range's."""
    kept = frame.localCheckpoint(True, StorageLevel.DISK_ONLY)
    rdd = kept._jdf.queryExecution().analyzed().rdd()   # the LogicalRDD over the checkpointed blocks

    def release() -> None:
        rdd.unpersist(False)

    return kept, release

"""A class-data sharing (CDS) archive for the driver JVM a Spark session starts: the classes Spark
loads, parsed and verified once and mapped from a file by every later JVM, so a short command
starts Spark in about half the time.

The archive is a JDK dynamic archive (``-XX:ArchiveClassesAtExit``) made by a warm-up Spark
session of its own (the kinds of jobs a drain and a restore run: Arrow batches through
``mapInArrow``, local checkpoints, joins, aggregates, plain RDDs). It is kept under
``$XDG_CACHE_HOME/binlake/spark-cds`` (``~/.cache`` without it) in a file named for the Java
executable, the pyspark version and install and Spark's jars with their sizes and modification
times, so another JDK or pyspark (another virtualenv, or the same one reinstalled in place) gets an
archive of its own. The JVM checks the archive when it maps it and ignores one that does not match
(``-Xshare``'s default ``auto``): an archive can make a start slower, never fail. Each archive
(about 170 MB) has a note beside it naming the Java and the pyspark install it was made for;
building one removes the archives whose Java or pyspark install is gone (a virtualenv deleted or
rebuilt elsewhere) or is its own (reinstalled since), so the cache holds one archive per live install.

:func:`java_options` gives the driver's options: the archive's when it exists; when it does not, it
starts :func:`build` in the background (one builder per archive, under a lock) and the session
starts without one. ``python -m transform.spark_archive`` builds it in the foreground (the
Makefile's setup does).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

# the JVM reports a mismatched or unusable archive on stdout at warning level: not the user's concern
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def archive_path() -> Path | None:
    """Where this Java and pyspark keep their archive (None: no java on PATH)."""
    import pyspark

    java = _java()
    if java is None:
        return None
    # the JVM checks the archive's class path, each jar's path, size and modification time: it declines
    # the archive of another pyspark install, or of this one reinstalled in place (the same paths)
    jars = sorted(f"{p.name} {st.st_size} {st.st_mtime_ns}"
                  for p in (_spark_home() / "jars").glob("*.jar") for st in [p.stat()])
    java_stat = os.stat(os.path.realpath(java))
    key = hashlib.sha256("\n".join([os.path.realpath(java), f"{java_stat.st_size} {java_stat.st_mtime_ns}",
                                    pyspark.__version__, str(_spark_home()), *jars]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "binlake" / "spark-cds" / f"spark-{pyspark.__version__}-{key}.jsa"


def _java() -> str | None:
    """The java executable Spark's launcher runs (``$JAVA_HOME/bin/java``, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java", path=os.path.join(home, "bin")) if home else shutil.which("java")


def _for_whom(path: Path) -> Path:
    """The note beside the archive ``path``: the Java executable and the pyspark install, a line each."""
    return path.with_suffix(".for")


def _installs(path: Path) -> list[str]:
    """The Java executable and pyspark install the note beside the archive ``path`` names ([] without one)."""
    note = _for_whom(path)
    return [p for p in note.read_text().splitlines() if p] if note.exists() else []


def prune(directory: Path, keep: Path) -> list[Path]:
    """Remove the archives in ``directory`` (other than ``keep``) whose noted Java or pyspark install
    no longer exists, or is ``keep``'s own (an earlier build for an install since reinstalled in
    place, which the JVM declines), with their note, lock and log; the archives removed. One without
    a note (made before notes were kept) is left alone."""
    kept_for = _installs(keep)
    removed = []
    for archive in sorted(directory.glob("spark-*.jsa")):
        if archive == keep or not _for_whom(archive).exists():
            continue
        installs = _installs(archive)
        if installs != kept_for and all(Path(p).exists() for p in installs):
            continue
        for part in (archive, _for_whom(archive), archive.with_suffix(".lock"), archive.with_suffix(".log")):
            part.unlink(missing_ok=True)
        removed.append(archive)
    return removed


def java_options(build_missing: bool = True) -> str:
    """The driver JVM's options that map the archive ("" when there is none yet; then, with
    ``build_missing``, one is built in the background for the next session)."""
    path = archive_path()
    if path is None:
        return ""
    if path.exists():
        return f"-XX:SharedArchiveFile={path} {_QUIET}"
    if build_missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".log"), "ab") as log:
            subprocess.Popen([sys.executable, "-m", "transform.spark_archive", str(path)], stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                                 str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")]))})
    return ""


def build(path: Path) -> bool:
    """Make the archive at ``path`` (a warm-up session in a child process writes it when its JVM
    exits; it is renamed into place whole, its note beside it) and :func:`prune` the stale ones
    beside it. False when another builder holds the lock or the warm-up failed (its output is in
    ``path.log``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if path.exists():
            return True
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        try:
            done = subprocess.run([sys.executable, "-m", "transform.spark_archive", "--warm-up", str(tmp)],
                                  stdin=subprocess.DEVNULL, check=False)
            if done.returncode != 0 or not tmp.exists() or tmp.stat().st_size == 0:
                return False
            java = _java()
            _for_whom(path).write_text(f"{os.path.realpath(java) if java else ''}\n{_spark_home()}\n")
            os.replace(tmp, path)
            prune(path.parent, keep=path)
            return True
        finally:
            tmp.unlink(missing_ok=True)


def _warm_up(dump_to: Path) -> None:
    """A Spark session whose JVM writes its classes to ``dump_to`` when it exits, after jobs of the
    kinds binlake runs; returns once that JVM has exited."""
    import pyarrow as pa
    from pyspark import SparkContext, StorageLevel
    from pyspark.sql import functions as F

    from transform.spark import spark_session

    spark = spark_session("local[2]", "binlake-spark-archive",
                          {"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={dump_to} {_QUIET}"},
                          class_archive=False)

    def same(batches):  # type: ignore[no-untyped-def]
        yield from batches

    rows = pa.table({"k": list(range(2000)), "v": [b"x" * 64] * 2000})
    frame = spark.createDataFrame(rows.to_pandas()).mapInArrow(same, "k long, v binary")
    kept = frame.localCheckpoint(True, StorageLevel.DISK_ONLY)
    small = kept.groupBy((F.col("k") % 7).alias("g")).agg(F.min("k").alias("k"), F.count("v").alias("n"))
    kept.join(F.broadcast(small), "k", "left").dropDuplicates(["k"]).unionByName(kept.withColumn("g", F.lit(0))
                                                                                  .withColumn("n", F.lit(0))).toArrow()
    kept.join(small, "k").where(F.col("n") > 0).count()
    sc = spark.sparkContext
    pairs = sc.parallelize([(i % 5, i) for i in range(100)], 2)
    pairs.leftOuterJoin(sc.parallelize([(1, "a")], 1)).mapPartitions(lambda it: [sum(1 for _ in it)]).collect()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    spark.stop()
    if proc is not None:   # the JVM exits when its stdin closes, and writes the archive as it exits
        proc.stdin.close()
        proc.wait(timeout=300)


def main(argv: list[str]) -> int:
    """``[--warm-up] PATH``; no PATH: this Java's and pyspark's archive (:func:`archive_path`)."""
    if argv[:1] == ["--warm-up"]:
        _warm_up(Path(argv[1]))
        return 0
    path = Path(argv[0]) if argv else archive_path()
    if path is None:
        print("no java on PATH: no archive", file=sys.stderr)
        return 1
    if path.exists():
        print(f"{path} exists")
        return 0
    made = build(path)
    print(f"{path} built" if made else f"{path} not built (another builder runs, or see {path.with_suffix('.log')})")
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

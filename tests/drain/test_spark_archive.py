"""The class-data sharing archive of Spark's classes (``transform.spark_archive``): built once, then
mapped by the driver JVM of every session binlake starts (Spark's classes load from it), left out
when the user names their own ``-Xshare`` options or turns it off."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from transform.spark import DRIVER_JAVA_OPTIONS, session_settings, with_class_archive
from transform.spark_archive import archive_path, build, java_options

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

_CHILD = """
import sys
from transform.spark import spark_session
spark = spark_session("local[1]", "archive-test", {"spark.driver.extraJavaOptions": sys.argv[1]},
                      class_archive=sys.argv[2] == "on")
spark.range(3).count()
print("OPTIONS", spark.sparkContext.getConf().get("spark.driver.extraJavaOptions"))
"""


def _classes_from_archive(tmp_path: Path, archive: str) -> tuple[int, str, str]:
    """Start a session in a child process with the archive ``on``/``off``; (Spark classes the JVM
    loaded from the archive, the driver's Java options, what the JVM said of the archives it mapped)."""
    log, cds = tmp_path / f"classes-{archive}.log", tmp_path / f"cds-{archive}.log"
    for old in (log, cds):
        old.unlink(missing_ok=True)
    options = f"-Xlog:class+load=info:file={log} -Xlog:cds=info,cds+dynamic=info:file={cds}"
    done = subprocess.run([sys.executable, "-c", _CHILD, options, archive],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    options = next(line for line in done.stdout.splitlines() if line.startswith("OPTIONS"))
    shared = sum(1 for line in log.read_text().splitlines()
                 if "org.apache.spark." in line and "shared objects file (top)" in line)
    said = [line for line in cds.read_text().splitlines() if "optimized module handling" not in line]
    return shared, options, "\n".join(said[:40])


def test_sessions_map_the_archive_once_built_and_not_when_turned_off(tmp_path: Path) -> None:
    path = archive_path()
    assert path is not None, "java is on PATH here"
    assert path.exists() or build(path), path.with_suffix(".log").read_text()[-2000:]
    assert java_options(build_missing=False) == f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"
    on, options, said = _classes_from_archive(tmp_path, "on")
    if on == 0:   # the JVM may decline an archive on a given start (-Xshare:auto): a second start must map it
        on, options, again = _classes_from_archive(tmp_path, "on")
        said = f"first start:\n{said}\nsecond start:\n{again}"
    assert on > 1000, f"{on} Spark classes came from the archive; the JVM said:\n{said}"   # thousands: it mapped
    assert f"SharedArchiveFile={path}" in options
    off, options, _ = _classes_from_archive(tmp_path, "off")
    assert off == 0 and "SharedArchiveFile" not in options


def test_the_archive_is_added_to_the_users_java_options_unless_they_name_one() -> None:
    flags = "-XX:SharedArchiveFile=/a.jsa"
    settings = session_settings("local[1]", {DRIVER_JAVA_OPTIONS: "-Dx=1"})
    assert with_class_archive(settings, lambda: flags)[DRIVER_JAVA_OPTIONS] == f"-Dx=1 {flags}"
    assert with_class_archive(session_settings("local[1]"), lambda: flags)[DRIVER_JAVA_OPTIONS] == flags
    assert DRIVER_JAVA_OPTIONS not in with_class_archive(session_settings("local[1]"), lambda: "")   # none built
    for mine in ("-Xshare:off", "-XX:SharedArchiveFile=/mine.jsa", "-XX:ArchiveClassesAtExit=/x.jsa"):
        settings = session_settings("local[1]", {DRIVER_JAVA_OPTIONS: mine})
        assert with_class_archive(settings, lambda: flags)[DRIVER_JAVA_OPTIONS] == mine
    # the archive's place follows the Java and pyspark in use, under the user's cache directory
    env = {**os.environ, "XDG_CACHE_HOME": "/nonexistent-cache"}
    out = subprocess.run([sys.executable, "-c", "from transform.spark_archive import archive_path; "
                          "print(archive_path())"], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert out.stdout.startswith("/nonexistent-cache/binlake/spark-cds/spark-") and out.stdout.strip().endswith(".jsa")


def test_a_reinstall_in_place_gets_an_archive_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM declines an archive whose jars changed size or modification time (a virtualenv
    recreated at the same path, as CI's clean clone does): such an install is named apart."""
    from transform import spark_archive

    home = tmp_path / "pyspark"
    (home / "jars").mkdir(parents=True)
    jar = home / "jars" / "slf4j-api-2.0.17.jar"
    jar.write_bytes(b"jar")
    monkeypatch.setattr(spark_archive, "_spark_home", lambda: home)
    first = archive_path()
    assert first is not None and archive_path() == first
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))   # reinstalled: same bytes
    second = archive_path()
    assert second is not None and second != first
    jar.write_bytes(b"jar2")
    assert archive_path() not in (first, second)


def test_a_build_notes_its_installs_and_removes_the_archives_of_installs_gone(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each archive is about 170 MB and a virtualenv gets its own: building one removes those whose
    Java or pyspark install is gone or is the new one's own (reinstalled since), keeps those of
    other live installs and ones without a note."""
    import pyspark

    from transform import spark_archive

    cache = tmp_path / "spark-cds"
    cache.mkdir()
    gone, live = tmp_path / "old-venv" / "pyspark", Path(pyspark.__file__).parent
    other = tmp_path / "other-venv" / "pyspark"
    other.mkdir(parents=True)

    def archive(name: str, installs: list[Path] | None) -> Path:
        path = cache / f"spark-4.3.0-{name}.jsa"
        for suffix in (".jsa", ".lock", ".log"):
            path.with_suffix(suffix).write_bytes(b"x")
        if installs is not None:
            path.with_suffix(".for").write_text("".join(f"{p}\n" for p in installs))
        return path

    java = Path(spark_archive._java() or "/usr/bin/java")
    stale, kept, unnoted = archive("stale", [java, gone]), archive("live", [java, other]), archive("unnoted", None)
    superseded = archive("before-reinstall", [Path(os.path.realpath(java)), live])

    def warm_up(cmd: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        Path(cmd[-1]).write_bytes(b"archive")      # what the warm-up's JVM writes as it exits
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(spark_archive.subprocess, "run", warm_up)
    new = cache / "spark-4.3.0-new.jsa"
    assert spark_archive.build(new)
    assert new.read_bytes() == b"archive"
    assert new.with_suffix(".for").read_text().splitlines() == [os.path.realpath(java), str(live)]
    assert {p.stem for p in cache.iterdir()} == {kept.stem, unnoted.stem, new.stem}   # stale: archive, note, lock, log
    assert not any(cache.glob(f"{stale.stem}.*")) and not any(cache.glob(f"{superseded.stem}.*"))
    assert kept.with_suffix(".for").exists()

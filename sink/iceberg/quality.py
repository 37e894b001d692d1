"""``binlake check``: quality gates over one Iceberg run, with Great Expectations on Spark.

The run checked is the one that ended at ``to_ts``; its report (``DATA_DIR/reports/run-<to_ts>.json``)
names the tables it wrote and their row changes per op. Per table, two suites:

* ``<table> changelog``, over the rows the run appended to ``<table>__changelog``: ``_tidb_op`` is one
  of I, U, D; ``_tidb_commit_ts`` lies in the run's range ``(from_ts, to_ts]``; the rows per op equal
  the report's; a column that is NOT NULL upstream holds no NULL, except a DATE/DATETIME/TIMESTAMP
  column, which may hold as many as the run nulled zero/invalid dates (the report's ``nulled_values``).
* ``<table> mirror``, over ``<table>`` at its snapshot for ``to_ts``: the key (the Iceberg identifier
  fields) is non-null and unique, compound for several columns; its rows equal the rows at
  ``from_ts`` plus the run's inserts minus its deletes (left out, with a note, when the run truncated,
  dropped or re-keyed the table); a NOT NULL column holds no NULL (dates excepted: earlier runs'
  zero dates are NULL too).

Finding the rows without pulling them into the driver: every snapshot a run commits carries the
``binlake.*`` markers (``RunBatch.markers``). The run's changelog rows are the data files added by
the changelog snapshots whose ``binlake.batch-id`` is the report's; the mirror at ``to_ts`` and at
``from_ts`` are the snapshots :func:`sink.iceberg.verify.choose_snapshot` picks, whose summaries give their
``total-records``. The driver reads this metadata only; Spark reads the data files by Parquet field
id (``spark.sql.parquet.fieldId.read.enabled``), so the names are those of the snapshot's schema
whatever renames followed. The NOT NULL flags come from the upstream's DDL history (the TableInfo
of the table id and schema version the table's properties record).

GE's validation results are saved as JSON and rendered as data docs (HTML) under the output
directory; the summary names every failed expectation with its table and observed value.
"""
from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe
from great_expectations.core.expectation_validation_result import (
    ExpectationSuiteValidationResult,
    ExpectationValidationResult,
)
from great_expectations.data_context.types.base import ProgressBarsConfig
from great_expectations.expectations.row_conditions import Column as RowColumn
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntryStatus
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql import types as st

from sink.changelog import BATCH_ID_MARKER, DROPPED_INFIX, changelog_name
from sink.errors import SinkError
from sink.iceberg import schema as ks
from sink.iceberg.catalog import table_or_none
from sink.iceberg.verify import choose_snapshot, marked_snapshots
from transform import changes as ch
from transform.codec import mysqltypes as mt
from transform.codec.model import TableInfo
from transform.history import SchemaHistory

OPS = ("I", "U", "D")
BELOW_TO = "_tidb_commit_ts_below_to"   # the run's to_ts minus a changelog row's commit_ts
FIELD_ID_READ = "spark.sql.parquet.fieldId.read.enabled"
SITE = "binlake"
RESULTS_FILE = "results.json"
_TEMPORAL = (mt.Family.DATE, mt.Family.DATETIME, mt.Family.TIMESTAMP)
# DDL after which the mirror's row count does not follow inserts - deletes
_RESETS = re.compile(r"^\s*(truncate|drop\s+(table|database|schema)|alter\s+table\b.*\bprimary\s+key)\b",
                     re.IGNORECASE | re.DOTALL)


class QualityError(SinkError):
    """The check could not run: an unusable run report or a table it cannot read."""


@dataclass
class Failure:
    """One expectation that did not hold: on which table and data (``target``), the GE expectation
    type, the promise in words and what was observed."""

    table: str
    target: str
    expectation: str
    promise: str
    observed: str

    def format(self) -> str:
        """One line of text."""
        return f"{self.expectation} on {self.target}: {self.promise}; observed {self.observed}"

    def to_json(self) -> dict[str, str]:
        """A JSON-friendly dict."""
        return {"table": self.table, "target": self.target, "expectation": self.expectation,
                "promise": self.promise, "observed": self.observed}


@dataclass
class TableCheck:
    """The gates of one table: how many expectations ran, which failed, and notes."""

    table: str
    expectations: int = 0
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nulled_dates: int = 0     # NULLs in NOT NULL date/time columns of the run's changelog rows

    @property
    def ok(self) -> bool:
        """True when every expectation held."""
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {"table": self.table, "ok": self.ok, "expectations": self.expectations,
                "failures": [f.to_json() for f in self.failures], "notes": list(self.notes),
                "nulled_dates": self.nulled_dates}


@dataclass
class QualityReport:
    """Every table's gates for the run ``(from_ts, to_ts]``; ``ok`` when all held."""

    from_ts: int
    to_ts: int
    batch_id: str
    nulled_values: int = 0
    tables: list[TableCheck] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)     # tables of the report the run did not write
    results_path: Path | None = None
    docs_path: Path | None = None

    @property
    def ok(self) -> bool:
        """True when every expectation of every table held."""
        return all(t.ok for t in self.tables)

    @property
    def failures(self) -> list[Failure]:
        """Every failed expectation, table by table."""
        return [f for t in self.tables for f in t.failures]

    def format(self) -> str:
        """The text the CLI prints: a head line, one line per table, its failures and notes, the files."""
        total = sum(t.expectations for t in self.tables)
        failed = len(self.failures)
        lines = [f"check of run ({self.from_ts}, {self.to_ts}] (batch {self.batch_id or '-'}): "
                 f"{len(self.tables)} table(s), {total} expectation(s), "
                 + ("all hold" if not failed else f"{failed} failed")]
        width = max((len(t.table) for t in self.tables), default=0)
        for t in self.tables:
            dates = f", {t.nulled_dates} zero/invalid date(s) as NULL" if t.nulled_dates else ""
            lines.append(f"  {'OK  ' if t.ok else 'FAIL'} {t.table:<{width}}  {t.expectations} expectation(s)"
                         f"{dates}")
            lines.extend(f"         ! {f.format()}" for f in t.failures)
            lines.extend(f"         - {n}" for n in t.notes)
        if self.skipped:
            lines.append(f"  not written by this run: {', '.join(self.skipped)}")
        nulled = sum(t.nulled_dates for t in self.tables)
        if nulled or self.nulled_values:
            lines.append(f"  zero/invalid dates: {nulled} NULL(s) in NOT NULL columns of the run's changelog rows, "
                         f"{self.nulled_values} value(s) nulled by the run (report)")
        if self.results_path is not None:
            lines.append(f"  results    {self.results_path}")
        if self.docs_path is not None:
            lines.append(f"  data docs  {self.docs_path}")
        lines.append("PASS: every expectation holds" if self.ok
                     else f"FAIL: {failed} expectation(s) failed (see above)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly dict (without GE's results)."""
        return {"from_ts": self.from_ts, "to_ts": self.to_ts, "batch_id": self.batch_id, "ok": self.ok,
                "nulled_values": self.nulled_values, "tables": [t.to_json() for t in self.tables],
                "skipped": list(self.skipped), "failures": [f.to_json() for f in self.failures]}


# ---------------------------------------------------------------------------------------------
# the run's snapshots and files

def added_files(tbl: Table, snap: Snapshot) -> list[str]:
    """Paths of the data files ``snap`` added (its own manifests' ADDED entries; metadata only).
    Raises :class:`QualityError` for delete files, which binlake never writes."""
    paths = []
    for manifest in snap.manifests(tbl.io):
        if manifest.added_snapshot_id != snap.snapshot_id:
            continue
        if manifest.content != ManifestContent.DATA:
            raise QualityError(f"table {'.'.join(tbl.name())}: snapshot {snap.snapshot_id} adds delete files, "
                               f"which binlake does not write and this check cannot apply")
        for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
            if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snap.snapshot_id:
                paths.append(entry.data_file.file_path)
    return paths


def _snapshot_files(tbl: Table, snap: Snapshot) -> tuple[list[str], list[str]]:
    """Paths of every data file of the table at ``snap``, and of its position delete files; refuses
    equality deletes, which binlake does not write."""
    paths, deletes = [], {}
    for task in tbl.scan(snapshot_id=snap.snapshot_id).plan_files():
        for d in task.delete_files:
            if d.content != DataFileContent.POSITION_DELETES:
                raise QualityError(f"table {'.'.join(tbl.name())}: snapshot {snap.snapshot_id} has equality "
                                   f"deletes, which binlake does not write and this check cannot apply")
            deletes[d.file_path] = d
        paths.append(task.file.file_path)
    return paths, sorted(deletes)


def _schema_at(tbl: Table, snap: Snapshot | None, ts: int) -> Schema:
    """The schema the table had at ``snap``: the current one when ``snap`` is current and the table's
    last run ended at ``ts`` (a DDL-only run evolves the schema without a snapshot)."""
    current = tbl.current_snapshot()
    if snap is None or (current is not None and current.snapshot_id == snap.snapshot_id
                        and tbl.properties.get(ks.PROP_TO_TS) == str(ts)):
        return tbl.schema()
    if snap.schema_id is not None:
        return tbl.schemas().get(snap.schema_id, tbl.schema())
    return tbl.schema()


def _total_records(snap: Snapshot | None) -> int | None:
    """The live rows of ``snap`` by its summary: its data files' records less its position deletes
    (binlake's never delete a row twice); None when the summary does not say."""
    if snap is None:
        return 0
    summary = snap.summary
    try:
        records = int(summary["total-records"]) if summary is not None else None   # type: ignore[arg-type]
        deleted = int(summary["total-position-deletes"] or 0) if summary is not None else 0
    except (KeyError, TypeError, ValueError):
        return None
    return records - deleted if records is not None else None


# ---------------------------------------------------------------------------------------------
# Spark frames over data files, by field id

def _spark_type(t: IcebergType) -> st.DataType | None:
    if isinstance(t, BooleanType):
        return st.BooleanType()
    if isinstance(t, IntegerType):
        return st.IntegerType()
    if isinstance(t, LongType):
        return st.LongType()
    if isinstance(t, FloatType):
        return st.FloatType()
    if isinstance(t, DoubleType):
        return st.DoubleType()
    if isinstance(t, DecimalType):
        return st.DecimalType(t.precision, t.scale)
    if isinstance(t, DateType):
        return st.DateType()
    if isinstance(t, TimestamptzType):
        return st.TimestampType()
    if isinstance(t, TimestampType):
        return st.TimestampNTZType()
    if isinstance(t, StringType):
        return st.StringType()
    if isinstance(t, BinaryType):
        return st.BinaryType()
    return None


def _spark_path(path: str) -> str:
    """A data file URI as Spark's Hadoop file systems name it (``s3://`` is ``s3a://`` there)."""
    return "s3a://" + path[len("s3://"):] if path.startswith("s3://") else path


def frame(spark: SparkSession, paths: list[str], fields: list[NestedField], deletes: Sequence[str] = ()) -> DataFrame:
    """The ``fields`` of the data files ``paths`` as a DataFrame, columns matched by Parquet field id
    (needs ``spark.sql.parquet.fieldId.read.enabled``, see :func:`field_id_reads`), without the rows
    the position delete files ``deletes`` delete (matched by file name, unique in a table, and row index)."""
    struct = st.StructType()
    for f in fields:
        typ = _spark_type(f.field_type)
        if typ is None:
            raise QualityError(f"column {f.name}: no Spark type for the Iceberg type {f.field_type}")
        struct.add(st.StructField(f.name, typ, True, {"parquet.field.id": f.field_id}))
    if not paths:
        return spark.createDataFrame([], struct)
    data = spark.read.schema(struct).parquet(*[_spark_path(p) for p in paths])
    if not deletes:
        return data
    name, pos = "_binlake_file", "_binlake_pos"
    data = data.select("*", sf.col("_metadata.file_name").alias(name), sf.col("_metadata.row_index").alias(pos))
    gone = spark.read.parquet(*[_spark_path(d) for d in deletes]).select(
        sf.regexp_extract("file_path", r"[^/]+$", 0).alias(name), sf.col("pos").alias(pos))
    return data.join(gone, [name, pos], "left_anti").drop(name, pos)


@contextmanager
def field_id_reads(spark: SparkSession) -> Iterator[None]:
    """Spark reads Parquet columns by field id while inside; the previous setting comes back after."""
    before = spark.conf.get(FIELD_ID_READ, None)
    spark.conf.set(FIELD_ID_READ, "true")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(FIELD_ID_READ)
        else:
            spark.conf.set(FIELD_ID_READ, before)


def _fields(schema: Schema, names: list[str]) -> list[NestedField]:
    by_name = {f.name: f for f in schema.fields}
    return [by_name[n] for n in dict.fromkeys(names) if n in by_name]


# ---------------------------------------------------------------------------------------------
# NOT NULL columns

def table_info_at(history: SchemaHistory, props: Mapping[str, str], ts: int) -> TableInfo | None:
    """The upstream TableInfo of a binlake table at ``ts``: the version its properties record when its
    last run ended at ``ts``, else the newest version of its table id whose DDL finished by ``ts``."""
    try:
        table_id = int(props[ks.PROP_TABLE_ID])
    except (KeyError, ValueError):
        return None
    if props.get(ks.PROP_TO_TS) == str(ts) and ks.PROP_SCHEMA_VERSION in props:
        version = history.version_at(table_id, int(props[ks.PROP_SCHEMA_VERSION]))
        return version.table if version is not None else None
    done = [v for v in history.versions(table_id) if 0 < v.job.binlog.finished_ts <= ts]
    return done[-1].table if done else None


def not_null_columns(info: TableInfo) -> tuple[list[str], list[str]]:
    """(NOT NULL columns, NOT NULL date/datetime/timestamp columns) of a table: public columns
    stored in rows (virtual generated ones are not)."""
    plain: list[str] = []
    temporal: list[str] = []
    for c in info.columns:
        if c.nullable or c.virtual_generated or c.state != mt.STATE_PUBLIC:
            continue
        family = mt.family_of(c.tp)
        (temporal if family in _TEMPORAL else plain).append(c.name)
    return plain, temporal


# ---------------------------------------------------------------------------------------------
# Great Expectations

def _observed(r: ExpectationValidationResult) -> str:
    """What a failed expectation saw: its exception, its observed value, or its unexpected rows."""
    info = r.exception_info or {}
    raised = [info] if "raised_exception" in info else [v for v in info.values() if isinstance(v, dict)]
    for each in raised:
        if each.get("raised_exception"):
            return f"error: {each.get('exception_message')}"
    result = r.result or {}
    if "observed_value" in result:
        return str(result["observed_value"])
    examples = list(result.get("partial_unexpected_list") or [])[:5]
    return (f"{result.get('unexpected_count')} of {result.get('element_count')} row(s) unexpected, "
            f"e.g. {examples}")


class Gate:
    """An ephemeral GE context with one Spark datasource: validates DataFrames against suites, keeps
    the results and renders them as data docs into ``docs_dir``."""

    def __init__(self, docs_dir: Path) -> None:
        logging.getLogger("great_expectations").setLevel(logging.WARNING)
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        self.context.add_data_docs_site(SITE, {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}})
        self.source = self.context.data_sources.add_spark("binlake")
        self.docs_dir = docs_dir
        self.results: list[ExpectationSuiteValidationResult] = []

    def validate(self, check: TableCheck, asset: str, target: str, expectations: list[gxe.Expectation],
                 data: DataFrame) -> None:
        """Run ``expectations`` as the suite ``<asset>`` on ``data``; failures go to ``check``."""
        batch = self.source.add_dataframe_asset(asset).add_batch_definition_whole_dataframe("run")
        suite = self.context.suites.add(gx.ExpectationSuite(name=asset))
        for e in expectations:
            suite.add_expectation(e)
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(name=asset, data=batch, suite=suite))
        result = definition.run(batch_parameters={"dataframe": data})
        self.results.append(result)
        check.expectations += len(result.results)
        for r in result.results:
            if not r.success:
                cfg = r.expectation_config
                promise = (cfg.description if cfg is not None and cfg.description else "")
                check.failures.append(Failure(check.table, target, cfg.type if cfg is not None else "?",
                                              promise, _observed(r)))

    def build_docs(self) -> Path:
        """Render every result as data docs; returns the site's index page."""
        self.context.build_data_docs(site_names=[SITE])
        return self.docs_dir / "index.html"


def _not_null(column: str, what: str) -> gxe.Expectation:
    return gxe.ExpectColumnValuesToNotBeNull(column=column, description=f"no NULL in {what} {column}")


# ---------------------------------------------------------------------------------------------
# the check

@dataclass(frozen=True)
class Run:
    """What the run report says about the run checked."""

    from_ts: int
    to_ts: int
    batch_id: str
    nulled_values: int
    tables: list[dict[str, Any]]

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> Run:
        """Parse a run report (``binlake drain``'s JSON); :class:`QualityError` when it is not an
        Iceberg run's."""
        if report.get("sink", "iceberg") != "iceberg":
            raise QualityError(f"the run report is of a {report.get('sink')} sink run: binlake check reads "
                               f"Iceberg warehouses")
        try:
            tables = list(report.get("tables") or [])
            return cls(int(report["from_ts"]), int(report["to_ts"]), str(report.get("batch_id") or ""),
                       int(report.get("nulled_values") or 0), tables)
        except (KeyError, TypeError, ValueError) as e:
            raise QualityError(f"the run report lacks from_ts/to_ts or is malformed: {e}") from e


def _changelogs(catalog: Catalog, db: str, name: str, run: Run) -> list[Table]:
    """``<name>__changelog`` and the changelogs of ``name`` dropped within the run."""
    try:
        idents = catalog.list_tables(db)
    except NoSuchNamespaceError:
        return []
    live = changelog_name(name)
    aside = live + DROPPED_INFIX
    out = []
    for ident in sorted(idents):
        t = ident[-1]
        ts = t[len(aside):] if t.startswith(aside) else ""
        if t == live or (ts.isdigit() and run.from_ts < int(ts) <= run.to_ts):
            out.append(catalog.load_table((db, t)))
    return out


class Checker:
    """Runs the gates of one run over a catalog on a Spark session (see the module doc)."""

    def __init__(self, catalog: Catalog, spark: SparkSession, run: Run, history: SchemaHistory | None,
                 gate: Gate) -> None:
        self.catalog = catalog
        self.spark = spark
        self.run = run
        self.history = history
        self.gate = gate

    def table(self, entry: Mapping[str, Any]) -> TableCheck:
        """The two suites of one table of the report."""
        name = str(entry["table"])
        check = TableCheck(name)
        db, _, tname = name.partition(".")
        rows = {op: int((entry.get("rows") or {}).get(op, 0)) for op in OPS}
        mirror = table_or_none(self.catalog, (db, tname))
        logs = _changelogs(self.catalog, db, tname, self.run)
        info = self._info(check, mirror or (logs[-1] if logs else None))
        plain, temporal = not_null_columns(info) if info is not None else ([], [])
        if logs:
            self._changelog(check, logs, rows, plain, temporal)
        elif any(rows.values()):
            check.failures.append(Failure(name, changelog_name(name), "changelog table exists",
                                          "the report counts row changes", "no changelog table in the catalog"))
        if mirror is not None:
            self._mirror(check, mirror, rows, list(entry.get("ddl") or []), plain)
        else:
            check.notes.append("no mirror table (dropped in the run): mirror suite left out")
        return check

    def _info(self, check: TableCheck, tbl: Table | None) -> TableInfo | None:
        if tbl is None:
            return None
        if self.history is None:
            check.notes.append("no DDL history: NOT NULL expectations left out")
            return None
        info = table_info_at(self.history, tbl.properties, self.run.to_ts)
        if info is None:
            check.notes.append(f"the DDL history has no definition of table id "
                               f"{tbl.properties.get(ks.PROP_TABLE_ID)} at {self.run.to_ts}: "
                               f"NOT NULL expectations left out")
        return info

    def _changelog(self, check: TableCheck, logs: list[Table], rows: dict[str, int], plain: list[str],
                   temporal: list[str]) -> None:
        run = self.run
        frames: list[DataFrame] = []
        names = [ch.OP, ch.COMMIT_TS]
        if len(logs) == 1:
            names += plain + temporal
        else:
            check.notes.append(f"the run wrote {len(logs)} changelogs of the name (dropped and created again): "
                               f"NOT NULL expectations on the changelog left out")
        found = False
        for log in logs:
            ours = [m for m in marked_snapshots(log) if m.run.batch_id == run.batch_id]
            found = found or bool(ours)
            paths = [p for m in ours for p in added_files(log, m.snapshot)]
            schema = _schema_at(log, ours[0].snapshot if ours else None, run.to_ts)
            frames.append(frame(self.spark, paths, _fields(schema, names)))
        if not found and any(rows.values()):
            check.failures.append(Failure(
                check.table, changelog_name(check.table), "run snapshot in the changelog",
                f"a changelog snapshot carries {BATCH_ID_MARKER} = {run.batch_id} (the report counts row changes)",
                "none on the main line (expired by maintenance, or rolled back?)"))
            return
        data = frames[0]
        for more in frames[1:]:
            data = data.unionByName(more, allowMissingColumns=True)
        present = set(data.columns)
        # GX compares a column with its bounds as floats: a commit_ts (~2^58) within ~64 of the range's
        # edge came out on the wrong side. Its distance below to_ts is exact in a float near the top
        # edge, and near the bottom one too unless the range starts at 0 (where no commit_ts comes near)
        data = data.withColumn(BELOW_TO, run.to_ts - data[ch.COMMIT_TS])
        target = f"{changelog_name(check.table)} (rows of run {run.batch_id})"
        expectations: list[gxe.Expectation] = [
            _not_null(ch.OP, "the change column"),
            gxe.ExpectColumnValuesToBeInSet(column=ch.OP, value_set=list(OPS),
                                            description=f"{ch.OP} is one of I, U, D"),
            _not_null(ch.COMMIT_TS, "the change column"),
            gxe.ExpectColumnValuesToBeBetween(
                column=BELOW_TO, min_value=0, max_value=run.to_ts - run.from_ts, strict_max=True,
                description=f"{ch.COMMIT_TS} within the run's range ({run.from_ts}, {run.to_ts}], "
                            f"as {BELOW_TO} = {run.to_ts} - {ch.COMMIT_TS} in [0, {run.to_ts - run.from_ts})")]
        for op in OPS:
            expectations.append(gxe.ExpectTableRowCountToEqual(
                value=rows[op], row_condition=RowColumn(ch.OP) == op,
                description=f"rows with {ch.OP} = {op} equal the run report's {op} = {rows[op]}"))
        expectations += [_not_null(c, "NOT NULL column") for c in plain if c in present]
        total = sum(rows.values())
        dated = [c for c in temporal if c in present]
        for c in dated:
            allowed = min(run.nulled_values, total)
            mostly = max(0.0, (total - allowed - 0.5) / total) if total else 1.0
            expectations.append(gxe.ExpectColumnValuesToNotBeNull(
                column=c, mostly=mostly,
                description=f"no NULL in NOT NULL column {c} but zero/invalid dates (at most {allowed}: "
                            f"the run's nulled_values)"))
        self.gate.validate(check, changelog_name(check.table), target, expectations, data)
        for r in self.gate.results[-1].results:
            cfg = r.expectation_config
            if cfg is not None and cfg.kwargs.get("column") in dated and "mostly" in cfg.kwargs:
                check.nulled_dates += int((r.result or {}).get("unexpected_count") or 0)

    def _mirror(self, check: TableCheck, mirror: Table, rows: dict[str, int], ddl: list[str],
                plain: list[str]) -> None:
        run = self.run
        end = choose_snapshot(mirror, run.to_ts)
        if end.problem:
            check.failures.append(Failure(check.table, check.table, "mirror snapshot at to_ts",
                                          f"the mirror has a snapshot for {run.to_ts}", end.problem))
            return
        schema = _schema_at(mirror, end.snapshot, run.to_ts)
        keys = ks.identifier_names(schema)
        if not keys:
            check.failures.append(Failure(check.table, check.table, "mirror key",
                                          "the mirror has identifier fields (its key)", "none"))
            return
        paths, deletes = _snapshot_files(mirror, end.snapshot) if end.snapshot is not None else ([], [])
        data = frame(self.spark, paths, _fields(schema, keys + plain), deletes)
        snap = f"snapshot {end.snapshot.snapshot_id}" if end.snapshot is not None else "empty"
        target = f"{check.table} (mirror at {run.to_ts}, {snap})"
        expectations: list[gxe.Expectation] = [_not_null(k, "key column") for k in keys]
        if len(keys) == 1:
            expectations.append(gxe.ExpectColumnValuesToBeUnique(
                column=keys[0], description=f"the key {keys[0]} is unique"))
        else:
            expectations.append(gxe.ExpectCompoundColumnsToBeUnique(
                column_list=keys, description=f"the key ({', '.join(keys)}) is unique"))
        expected = self._expected_rows(check, mirror, rows, ddl, keys)
        if expected is not None:
            start, value = expected
            expectations.append(gxe.ExpectTableRowCountToEqual(
                value=value, description=f"rows at {run.to_ts} = rows at {run.from_ts} ({start}) + inserts "
                                         f"({rows['I']}) - deletes ({rows['D']}) = {value}"))
        expectations += [_not_null(c, "NOT NULL column") for c in plain if c not in keys and c in data.columns]
        self.gate.validate(check, check.table, target, expectations, data)

    def _expected_rows(self, check: TableCheck, mirror: Table, rows: dict[str, int], ddl: list[str],
                       keys: list[str]) -> tuple[int, int] | None:
        """(rows at from_ts, the row count at to_ts the report implies), or None (with a note) when the
        run's DDL or another run's writes make the count not follow the report."""
        run = self.run
        resets = [q for q in ddl if _RESETS.search(q)]
        if resets:
            check.notes.append(f"row count not reconciled: the run's DDL {resets[0]!r} resets or re-keys the table")
            return None
        start = choose_snapshot(mirror, run.from_ts)
        if start.problem:
            check.notes.append(f"row count not reconciled: {start.problem}")
            return None
        others = [m.run for m in marked_snapshots(mirror)
                  if run.from_ts <= m.run.from_ts and m.run.to_ts <= run.to_ts and m.run.batch_id != run.batch_id]
        if others:
            other = others[0]
            check.notes.append(f"row count not reconciled: the mirror also holds run {other.batch_id} "
                               f"({other.from_ts}, {other.to_ts}] since {run.from_ts}")
            return None
        if start.snapshot is not None and ks.identifier_names(_schema_at(mirror, start.snapshot, run.from_ts)) != keys:
            check.notes.append("row count not reconciled: the key changed in the run")
            return None
        before = _total_records(start.snapshot)
        if before is None:
            check.notes.append("row count not reconciled: the snapshot at from_ts has no total-records")
            return None
        return before, before + rows["I"] - rows["D"]


def _as_json(result: Any) -> dict[str, Any]:
    """GE's JSON form of a suite's validation result (GE leaves ``to_json_dict`` unannotated)."""
    doc: dict[str, Any] = result.to_json_dict()
    return doc


def check_run(catalog: Catalog, spark: SparkSession, report: Mapping[str, Any], history: SchemaHistory | None,
              out_dir: Path, tables: list[str] | None = None) -> QualityReport:
    """Run the gates of the run ``report`` describes over ``catalog``'s tables on ``spark``; GE's
    results go to ``out_dir/results.json`` and its data docs to ``out_dir/docs`` (both replaced).
    ``tables`` (``db.table``, case-insensitive) limits the tables checked; ``history`` None leaves the
    NOT NULL expectations out. Raises :class:`QualityError` for an unusable report or table."""
    run = Run.from_report(report)
    wanted = {t.lower() for t in tables} if tables else None
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    result = QualityReport(run.from_ts, run.to_ts, run.batch_id, run.nulled_values)
    gate = Gate(out_dir / "docs")
    checker = Checker(catalog, spark, run, history, gate)
    with field_id_reads(spark):
        for entry in run.tables:
            name = str(entry.get("table", ""))
            if wanted is not None and name.lower() not in wanted:
                continue
            if entry.get("skipped"):
                result.skipped.append(f"{name} ({entry['skipped']})")
                continue
            result.tables.append(checker.table(entry))
    result.results_path = out_dir / RESULTS_FILE
    doc = result.to_json()
    doc["validations"] = [_as_json(r) for r in gate.results]
    result.results_path.write_text(json.dumps(doc, indent=1, default=str))
    result.docs_path = gate.build_docs() if gate.results else None
    return result

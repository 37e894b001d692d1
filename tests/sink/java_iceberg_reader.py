"""Java Iceberg's reading of Iceberg catalogs, as JSON: run by the Python of the Spark that has an
iceberg-spark-runtime (``make iceberg-spark``: ``.peers/iceberg-spark/venv``), not by binlake's, so it
imports nothing but pyspark and the standard library.

    python java_iceberg_reader.py CATALOGS_JSON JARS OUT_JSON

CATALOGS_JSON maps a Spark catalog name to its settings: ``{"type": "jdbc", "uri": "jdbc:sqlite:…",
"warehouse": "file://…"}`` (the name must be ``binlake``, the ``catalog_name`` pyiceberg writes) or
``{"type": "rest", "uri": "http://…"}``. JARS: the jars ``make iceberg-spark`` downloads, comma-separated.
One Spark session reads every catalog; for each namespace and table OUT_JSON gets what the table's
Java ``Table`` says (every schema with its field ids, every partition spec, the refs, the snapshots
with their summaries, the properties) and the rows of the current snapshot, of every ref
(``VERSION AS OF 'name'``) and of every snapshot (``VERSION AS OF id``), each row a dict of JSON
values (``normalise``), the rows sorted."""
from __future__ import annotations

import base64
import datetime
import decimal
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession


def normalise(value: Any) -> Any:
    """A column value as JSON: decimals as their text, timestamps as ISO text in UTC without a zone,
    dates as ISO text, bytes as base64, structs, lists and maps element by element."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {str(k): normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    return value


def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with normalised values, in the order of their JSON text."""
    out = [{k: normalise(v) for k, v in r.items()} for r in rows]
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))


def session(catalogs: dict[str, dict[str, str]], jars: list[str]) -> SparkSession:
    """One local Spark with the Iceberg runtime and a ``SparkCatalog`` per entry of ``catalogs``."""
    builder = (SparkSession.builder.master("local[1]").appName("java-iceberg-reader")
               .config("spark.jars", ",".join(jars))
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "1"))
    for name, settings in catalogs.items():
        builder = builder.config(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
        for key, value in settings.items():
            builder = builder.config(f"spark.sql.catalog.{name}.{key}", value)
    return builder.getOrCreate()


def quoted(*parts: str) -> str:
    """A multi-part Spark SQL identifier with every part in backquotes."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def schema_json(schema: Any) -> dict[str, Any]:
    """A Java ``Schema``: its id and its top-level fields (id, name, type, required), in order."""
    return {"schema_id": schema.schemaId(),
            "fields": [[f.fieldId(), f.name(), f.type().toString(), f.isRequired()] for f in schema.columns()]}


def spec_json(spec: Any) -> dict[str, Any]:
    """A Java ``PartitionSpec``: its id and its fields (source id, field id, name, transform)."""
    return {"spec_id": spec.specId(),
            "fields": [[f.sourceId(), f.fieldId(), f.name(), f.transform().toString()] for f in spec.fields()]}


def snapshot_json(snapshot: Any) -> dict[str, Any]:
    """A Java ``Snapshot``: ids, schema id, and the summary with its operation."""
    parent = snapshot.parentId()
    summary = dict(snapshot.summary())
    summary["operation"] = snapshot.operation()
    return {"snapshot_id": snapshot.snapshotId(), "parent_id": None if parent is None else int(parent),
            "schema_id": snapshot.schemaId(), "summary": summary}


def read_rows(spark: SparkSession, name: str, version: str | None = None) -> list[dict[str, Any]]:
    """The rows of table ``name`` (quoted), now or ``VERSION AS OF version`` (a literal)."""
    sql = f"SELECT * FROM {name}" + (f" VERSION AS OF {version}" if version is not None else "")
    return sorted_rows([r.asDict(recursive=True) for r in spark.sql(sql).collect()])


def read_table(spark: SparkSession, catalog: str, namespace: str, table: str) -> dict[str, Any]:
    """What Java Iceberg reads of one table (see the module's docstring)."""
    name = quoted(catalog, namespace, table)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    t = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)
    current = t.currentSnapshot()
    refs = {str(k): {"type": "branch" if v.isBranch() else "tag", "snapshot_id": v.snapshotId()}
            for k, v in dict(t.refs()).items()}
    snapshots = [snapshot_json(s) for s in t.snapshots()]
    return {
        "schema": schema_json(t.schema()),
        "schemas": {str(k): schema_json(v) for k, v in dict(t.schemas()).items()},
        "spec": spec_json(t.spec()),
        "specs": {str(k): spec_json(v) for k, v in dict(t.specs()).items()},
        "properties": dict(t.properties()),
        "current_snapshot_id": None if current is None else current.snapshotId(),
        "refs": refs,
        "snapshots": snapshots,
        "rows": read_rows(spark, name) if current is not None else [],
        "ref_rows": {ref: read_rows(spark, name, "'" + ref.replace("'", "\\'") + "'") for ref in sorted(refs)},
        "snapshot_rows": {str(s["snapshot_id"]): read_rows(spark, name, str(s["snapshot_id"])) for s in snapshots},
    }


def read_catalog(spark: SparkSession, catalog: str) -> dict[str, Any]:
    """Every table of every namespace of ``catalog``, by ``namespace.table``."""
    out: dict[str, Any] = {}
    for ns_row in spark.sql(f"SHOW NAMESPACES IN {quoted(catalog)}").collect():
        namespace = ns_row[0]
        for t_row in spark.sql(f"SHOW TABLES IN {quoted(catalog, namespace)}").collect():
            table = t_row["tableName"]
            out[f"{namespace}.{table}"] = read_table(spark, catalog, namespace, table)
    return out


def main(argv: list[str]) -> None:
    """Read the catalogs of ``argv[1]`` with the jars of ``argv[2]``; write the JSON to ``argv[3]``."""
    os.environ["TZ"] = "UTC"     # pyspark makes a timestamp a naive datetime in the local zone
    time.tzset()
    catalogs: dict[str, dict[str, str]] = json.loads(argv[1])
    jars = [j for j in argv[2].split(",") if j]
    spark = session(catalogs, jars)
    try:
        result = {"spark": spark.version, "catalogs": {c: read_catalog(spark, c) for c in catalogs}}
    finally:
        spark.stop()
    Path(argv[3]).write_text(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv)

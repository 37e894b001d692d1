"""The local (or given) Spark session the Drainer runs on, with the settings this stack needs."""
from __future__ import annotations

import os
import sys
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

_SPARK_TYPES = {pa.int32(): "int", pa.int64(): "long", pa.string(): "string", pa.binary(): "binary"}


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL string (``mapInArrow``'s output schema) of an Arrow schema of simple columns."""
    return ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}{'' if f.nullable else ' not null'}" for f in schema)


def spark_session(master: str = "local[*]", app_name: str = "binlake-drain",
                  conf: dict[str, Any] | None = None) -> SparkSession:
    """A SparkSession whose Python workers run this interpreter, bound to loopback for local masters.

    ``conf`` entries override the defaults (4 shuffle partitions, no UI, Arrow on, 4 GB driver).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings: dict[str, Any] = {
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if sys.stderr.isatty() else "false",  # Spark's stage bars
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
        "spark.driver.memory": "4g",
        "spark.sql.adaptive.enabled": "false",
        "spark.python.worker.reuse": "true",
    }
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings["spark.driver.bindAddress"] = "127.0.0.1"
        settings["spark.driver.host"] = "127.0.0.1"
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark

"""``binlake_backfill``: drain a given commit-ts range into a given warehouse, chunk by chunk.

Triggered by hand with params ``from_ts``, ``to_ts`` (the range ``(from_ts, to_ts]``), ``warehouse``
(and ``catalog_uri`` when the drainer.toml names a shared catalog), optionally ``tables``
(``db.t,db2.t2``) and ``chunk_seconds`` (upstream time per chunk, default one hour).

1. ``validate`` — the range is ordered; ``binlake drain --dry-run`` over it refuses a ``to_ts`` above
   the pumps' watermark or a ``from_ts`` below a pump's GC point; the warehouse is fresh, continues
   at ``from_ts``, or holds this very backfill's finished chunks.
2. ``backfill`` — the range cut into chunks of ``chunk_seconds`` of TSO physical time, each one
   ``binlake drain --from-ts --to-ts`` (one Iceberg commit per table), in order. A finished chunk
   leaves its run report in ``DATA_DIR/backfill/<from>-<to>-<key>/``; a failed or killed chunk is
   retried from its start (binlake's exactly-once commits keep what it had committed), and chunks
   already finished are not drained again, whether the task is cleared or the DAG triggered again
   with the same params.
"""
from __future__ import annotations

import hashlib
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException

sys.path.append(str(Path(__file__).resolve().parent))   # binlake_airflow.py, wherever the DAGs are deployed
from binlake_airflow import check_report, data_dir, drainer_conf, run_with_report

PHYSICAL_SHIFT = 18   # a TSO is physical milliseconds << 18 | logical
MAX_CHUNKS = 10_000   # each chunk is a drain: more means a chunk_seconds (or a from_ts of 0) by mistake


def chunks(from_ts: int, to_ts: int, chunk_seconds: float) -> list[tuple[int, int]]:
    """``(from_ts, to_ts]`` cut into consecutive ranges of ``chunk_seconds`` of TSO physical time."""
    step = max(1, int(chunk_seconds * 1000)) << PHYSICAL_SHIFT
    out, start = [], from_ts
    while start < to_ts:
        end = min(start + step, to_ts)
        out.append((start, end))
        start = end
    return out


def _target_args(params: dict[str, Any]) -> list[str]:
    args = ["--warehouse", params["warehouse"]]
    if params.get("catalog_uri"):
        args += ["--catalog-uri", params["catalog_uri"]]
    if params.get("tables"):
        args += ["--tables", params["tables"]]
    return args


with DAG(
    dag_id="binlake_backfill",
    description="binlake: drain a commit-ts range into a chosen warehouse, in chunks that resume",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    params={
        "from_ts": Param(type="integer", minimum=0, description="start of the range (exclusive)"),
        "to_ts": Param(type="integer", minimum=1, description="end of the range (inclusive), at most the "
                                                              "pumps' watermark"),
        "warehouse": Param(type="string", minLength=1, description="the warehouse to fill (fresh, or continuing "
                                                                   "at from_ts)"),
        "catalog_uri": Param("", type="string", description="its catalog (default: SQLite beside the warehouse)"),
        "tables": Param("", type="string", description="only these tables, db.t,db2.t2 (default: all)"),
        "chunk_seconds": Param(3600, type="number", exclusiveMinimum=0,
                               description="upstream time per chunk (one Iceberg commit per table each)"),
        "config": Param("", type="string", description="drainer.toml (default: Variable binlake_drainer_conf, "
                                                       "then $BINLAKE_DRAINER_CONF)"),
    },
    default_args={"retries": 0, "execution_timeout": timedelta(hours=24)},
    tags=["binlake"],
    doc_md=__doc__,
) as dag:

    @task
    def validate(params: dict[str, Any]) -> dict[str, Any]:
        """Check the params against the pumps and the warehouse; returns the chunks and the progress dir."""
        conf = drainer_conf(params)
        lo, hi = int(params["from_ts"]), int(params["to_ts"])
        if lo >= hi:
            raise AirflowFailException(f"from_ts {lo} must be below to_ts {hi}")
        plan = run_with_report(conf, ["drain", "--dry-run", "--from-ts", str(lo), "--to-ts", str(hi)]
                               + _target_args(params))
        key = hashlib.sha256(json.dumps([params["warehouse"], params.get("catalog_uri"), params.get("tables"),
                                         params["chunk_seconds"]]).encode()).hexdigest()[:12]
        progress = data_dir(conf, plan) / "backfill" / f"{lo}-{hi}-{key}"
        started = progress.is_dir() and any(progress.glob("chunk-*.json"))
        have = plan["checkpoint_before"]
        if have is not None and have != lo and not started:
            raise AirflowFailException(
                f"warehouse {params['warehouse']} already holds data up to ts {have}: a backfill of ({lo}, {hi}] "
                f"needs a fresh warehouse or one whose checkpoint is from_ts")
        parts = chunks(lo, hi, float(params["chunk_seconds"]))
        if len(parts) > MAX_CHUNKS:
            raise AirflowFailException(f"({lo}, {hi}] in chunks of {params['chunk_seconds']} s is {len(parts)} "
                                       f"chunks (at most {MAX_CHUNKS}): raise chunk_seconds")
        print(f"backfill ({lo}, {hi}] into {params['warehouse']}: {len(parts)} chunk(s); progress in {progress}")
        return {"chunks": [{"from_ts": a, "to_ts": b} for a, b in parts], "progress": str(progress)}

    @task
    def backfill(spec: dict[str, Any], params: dict[str, Any]) -> list[dict[str, Any]]:
        """Drain the chunks in order, skipping those a report marks finished; returns one line per chunk."""
        conf = drainer_conf(params)
        progress = Path(spec["progress"])
        progress.mkdir(parents=True, exist_ok=True)
        done = []
        for n, chunk in enumerate(spec["chunks"], 1):
            lo, hi = chunk["from_ts"], chunk["to_ts"]
            mark = progress / f"chunk-{hi}.json"
            if mark.exists():
                print(f"chunk {n}/{len(spec['chunks'])} ({lo}, {hi}] finished earlier")
                report = json.loads(mark.read_text())
                check_report(report)
            else:
                print(f"chunk {n}/{len(spec['chunks'])} ({lo}, {hi}]")
                report = run_with_report(conf, ["drain", "--from-ts", str(lo), "--to-ts", str(hi)]
                                         + _target_args(params))
                tmp = mark.with_suffix(".tmp")
                tmp.write_text(json.dumps(report))
                tmp.replace(mark)   # written once the chunk's commits are done: a killed chunk has none
            done.append({"chunk": n, "from_ts": lo, "to_ts": hi,
                         "rows": {t["table"]: t["rows"] for t in report.get("tables", [])}})
        return done

    backfill(validate())

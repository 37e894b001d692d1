"""Incremental runs into mirrors of growing size: does a run cost what changed, or what the mirror holds?

Setup (not timed): ``bench/drain.py``'s emulated cluster, 4 tables of 12 columns and 2 real pumps.
One load writes, per size, enough TiDB-shaped row changes (60 % inserts, 30 % updates, 10 % deletes
over random live keys; ``--base inserts``: inserts only) to grow the 4 mirrors to that many live
rows, then ten more phases of ``--changes`` row changes each (always the mix); the warehouse is
drained to each size's base (not timed).

Timed per size: the ten incremental runs, each ``binlake drain`` as a fresh process continuing the
same warehouse (by default a range this small runs in the drain's own process): the run report's
``total``, the process wall, the bytes the process read (``rchar`` of ``/proc/self/io`` at exit:
every read, imports included, a fixed ~0.1 GB), and from the mirrors' new snapshots the bytes and
files written and removed, the position delete files added, beside the changelogs' added bytes
(the change's own data, as Parquet). Then a full read of the 4 mirrors by pyiceberg and DuckDB
after the ten runs, after ``binlake maintain``, and of a freshly written copy (pyiceberg create +
one append of the same rows: the compacted baseline).

Baseline: the smallest size's runs (the growth ratio); the fresh copy for the reads. Targets
(issue 56): the largest size's run within 1.3x the smallest's time, mirror bytes written within
3x the changelog's; a full read after ten runs within 1.5x the fresh copy's, after maintain 1.1x.

    flock /tmp/binlake-bench.lock .venv/bin/python bench/mirror_growth.py --live 500K,5M
    flock /tmp/binlake-bench.lock .venv/bin/python bench/mirror_growth.py --live 500K,20M --base inserts  # long
    flock /tmp/binlake-bench.lock .venv/bin/python bench/mirror_growth.py --mode copy-on-write   # before
    flock /tmp/binlake-bench.lock .venv/bin/python bench/mirror_growth.py --mode merge-on-read-unfolded
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import BenchError, machine_line
from bench.drain import DB, ROOT, TABLES, UTC, Env, _label, _load_avg, _sizes, _stages, cluster, drain, generate

RUNS = 10
TIME_TARGET = 1.3     # largest size's median run over the smallest's
BYTES_TARGET = 3.0    # mirror bytes written over the changelog's bytes written, per run
READ_TARGET = 1.5     # full read after the runs over the fresh copy's
MAINTAINED_TARGET = 1.1
MIX_INSERTS = 0.6       # the runs' share of inserts (30 % updates, 10 % deletes)
LIVE_PER_CHANGE = 0.5   # live rows a row change adds on average (60 % inserts - 10 % deletes)
_IO_WRAPPER = ("import runpy, sys\nsys.argv = ['binlake'] + sys.argv[1:]\ntry:\n"
               "    runpy.run_module('binlake.cli', run_name='__main__')\nfinally:\n"
               "    sys.stderr.write('PROCIO ' + ' '.join(open('/proc/self/io').read().split()) + '\\n')\n")


def timed_drain(env: Env, warehouse: Path, to_ts: int, log: Path) -> tuple[dict[str, Any], float, int]:
    """One ``binlake drain`` to ``to_ts`` continuing ``warehouse``: (report, wall s, bytes read)."""
    report = warehouse.parent / f"{warehouse.name}-report.json"
    cmd = [sys.executable, "-c", _IO_WRAPPER, "drain", "--registry", env.registry, "--pd-urls", env.cluster.tso_url,
           "--upstream-status-url", env.cluster.status_url, "--warehouse", str(warehouse),
           "--spark-master", "local[2]", "--to-ts", str(to_ts), "--report", str(report)]
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    wall = time.perf_counter() - t0
    text = log.read_text(errors="replace")
    if code != 0:
        raise BenchError(f"binlake drain exited with {code}:\n" + "\n".join(text.splitlines()[-30:]))
    io = text.rsplit("PROCIO ", 1)[1].split()
    rchar = int(io[io.index("rchar:") + 1])
    return json.loads(report.read_text()), wall, rchar


def snapshot_costs(warehouse: Path, before: dict[str, int | None]) -> tuple[dict[str, int], dict[str, int | None]]:
    """What the snapshots committed since ``before`` (table → snapshot id) wrote, summed over the 4
    mirrors and (``log_bytes``) the 4 changelogs; and the tables' current snapshot ids."""
    from sink.iceberg.catalog import open_catalog

    catalog = open_catalog(str(warehouse))
    out = {k: 0 for k in ("written", "removed", "files_added", "files_removed", "deletes_added",
                          "deletes_removed", "log_bytes")}
    now: dict[str, int | None] = {}
    for name in TABLES:
        for ident in (f"{DB}.{name}", f"{DB}.{name}__changelog"):
            tbl = catalog.load_table(ident)
            snap = tbl.current_snapshot()
            now[ident] = snap.snapshot_id if snap else None
            while snap is not None and snap.snapshot_id != before.get(ident):
                s = snap.summary
                assert s is not None

                def n(key: str, s: Any = s) -> int:
                    return int(s[key] or 0)

                if ident.endswith("__changelog"):
                    out["log_bytes"] += n("added-files-size")
                else:
                    out["written"] += n("added-files-size")
                    out["removed"] += n("removed-files-size")
                    out["files_added"] += n("added-data-files")
                    out["files_removed"] += n("deleted-data-files")
                    out["deletes_added"] += n("added-delete-files")
                    out["deletes_removed"] += n("removed-delete-files")
                snap = tbl.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return out, now


def full_reads(warehouse: Path) -> dict[str, Any]:
    """Seconds to read the 4 mirrors whole by pyiceberg and by DuckDB, their rows, files and delete files."""
    from sink.iceberg.catalog import open_catalog
    from sink.iceberg.duck import connect_iceberg

    catalog = open_catalog(str(warehouse))
    con = connect_iceberg()
    out = {"pyiceberg": 0.0, "duckdb": 0.0, "rows": 0, "files": 0, "deletes": 0}
    for name in TABLES:
        tbl = catalog.load_table(f"{DB}.{name}")
        t0 = time.perf_counter()
        rows = tbl.scan().to_arrow().num_rows
        t1 = time.perf_counter()
        duck = con.execute(f"SELECT * FROM iceberg_scan('{tbl.metadata_location}')").to_arrow_table().num_rows
        t2 = time.perf_counter()
        if rows != duck:
            raise BenchError(f"{name}: pyiceberg read {rows} rows, DuckDB {duck}")
        tasks = list(tbl.scan().plan_files())
        out["pyiceberg"] += t1 - t0
        out["duckdb"] += t2 - t1
        out["rows"] += rows
        out["files"] += len(tasks)
        out["deletes"] += len({d.file_path for t in tasks for d in t.delete_files})
    return out


def fresh_copy(src: Path, dst: Path) -> None:
    """The 4 mirrors written afresh: same schema and spec, one append of their rows each."""
    from sink.iceberg.catalog import open_catalog

    source, target = open_catalog(str(src)), open_catalog(str(dst))
    target.create_namespace_if_not_exists(DB)
    for name in TABLES:
        tbl = source.load_table(f"{DB}.{name}")
        copy = target.create_table((DB, name), tbl.schema(), partition_spec=tbl.spec(),
                                   properties={"format-version": "2"})
        copy.append(tbl.scan().to_arrow())


def maintain(env: Env, warehouse: Path, log: Path) -> float:
    """``binlake maintain`` of the warehouse (orphans left: none are old enough); wall seconds."""
    cmd = [sys.executable, "-m", "binlake.cli", "maintain", "--registry", env.registry, "--pd-urls",
           env.cluster.tso_url, "--warehouse", str(warehouse), "--spark-master", "local[2]", "--retention", "0s"]
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if code != 0:
        raise BenchError(f"binlake maintain exited with {code}:\n{log.read_text(errors='replace')[-3000:]}")
    return time.perf_counter() - t0


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def set_mode(warehouse: Path, mode: str) -> None:
    """The 4 mirrors' ``write.merge.mode`` (``merge-on-read-unfolded``: merge-on-read, ``binlake.merge.fold=false``)."""
    from sink.iceberg.catalog import open_catalog
    from sink.iceberg.position_deletes import FOLD_KEY, MERGE_ON_READ, MODE_KEY

    props = {MODE_KEY: MERGE_ON_READ, FOLD_KEY: "false"} if mode == "merge-on-read-unfolded" else {MODE_KEY: mode}
    catalog = open_catalog(str(warehouse))
    for name in TABLES:
        catalog.load_table(f"{DB}.{name}").transaction().set_properties(props).commit_transaction()


def one_size(env: Env, root: Path, wh: Path, live: int, base: dict[str, Any], runs: list[dict[str, Any]],
             mode: str) -> dict[str, Any]:
    """Drain to ``base`` (not timed), then the timed runs in ``mode``; the reads before and after maintain."""
    label = _label(live)
    t0 = time.perf_counter()
    drain(env, wh, base["to_ts"], root / f"base-{label}.log", "1g")
    set_mode(wh, mode)
    _, ids = snapshot_costs(wh, {})
    print(f"  [{label}] mirrors drained to {sum(base['live']):,} live rows in {time.perf_counter() - t0:.0f} s "
          f"(not timed)", flush=True)
    rows = []
    for i, phase in enumerate(runs):
        report, wall, rchar = timed_drain(env, wh, phase["to_ts"], root / f"run-{label}-{i}.log")
        cost, ids = snapshot_costs(wh, ids)
        rows.append({"total": report["stages"]["total"], "wall": wall, "rchar": rchar, **cost,
                     "engine": "spark" if report.get("spark") else "in process"})
        print(f"    run {i + 1:2d}: total {report['stages']['total']:.2f} s, wall {wall:.2f} s ({rows[-1]['engine']}); "
              f"read {_mib(rchar)}; mirrors +{_mib(cost['written'])} -{_mib(cost['removed'])}, data files "
              f"+{cost['files_added']} -{cost['files_removed']}, delete files +{cost['deletes_added']} "
              f"-{cost['deletes_removed']}; changelogs +{_mib(cost['log_bytes'])}; {_stages(report)}", flush=True)
    after = full_reads(wh)
    fresh_wh = root / f"fresh-{label}"
    fresh_copy(wh, fresh_wh)
    fresh = full_reads(fresh_wh)
    secs = maintain(env, wh, root / f"maintain-{label}.log")
    maintained = full_reads(wh)
    for name, r in (("after the runs", after), ("after maintain", maintained), ("fresh copy", fresh)):
        print(f"    full read {name}: pyiceberg {r['pyiceberg']:.2f} s, DuckDB {r['duckdb']:.2f} s; "
              f"{r['rows']:,} rows in {r['files']} data files, {r['deletes']} delete files", flush=True)
    print(f"    maintain took {secs:.1f} s", flush=True)
    return {"label": label, "live": sum(base["live"]), "runs": rows, "after": after, "fresh": fresh,
            "maintained": maintained}


def summary(sizes: list[dict[str, Any]], changes: int, runs: int) -> str:
    lines = []
    small = sizes[0]
    base_t = statistics.median(r["total"] for r in small["runs"])
    for s in sizes:
        t = statistics.median(r["total"] for r in s["runs"])
        wrote = statistics.median(r["written"] / max(r["log_bytes"], 1) for r in s["runs"])
        read = statistics.median(r["rchar"] for r in s["runs"])
        rw = max(s["after"]["pyiceberg"] / s["fresh"]["pyiceberg"], s["after"]["duckdb"] / s["fresh"]["duckdb"])
        rm = max(s["maintained"]["pyiceberg"] / s["fresh"]["pyiceberg"],
                 s["maintained"]["duckdb"] / s["fresh"]["duckdb"])
        lines.append(f"  {s['label']:>5} mirrors ({s['live']:,} live rows): median run {t:.2f} s "
                     f"({t / base_t:.2f}x the {small['label']} run's {base_t:.2f} s); mirror bytes written "
                     f"{wrote:.2f}x the changelog's; read {_mib(read)} per run; full read after {runs} runs "
                     f"{rw:.2f}x a fresh copy's, after maintain {rm:.2f}x")
    big = sizes[-1]
    t_ratio = statistics.median(r["total"] for r in big["runs"]) / base_t
    w_ratio = max(statistics.median(r["written"] / max(r["log_bytes"], 1) for r in s["runs"]) for s in sizes)
    r_ratio = max(max(s["after"][k] / s["fresh"][k] for k in ("pyiceberg", "duckdb")) for s in sizes)
    m_ratio = max(max(s["maintained"][k] / s["fresh"][k] for k in ("pyiceberg", "duckdb")) for s in sizes)
    verdict = [f"time {t_ratio:.2f}x <= {TIME_TARGET}: {'met' if t_ratio <= TIME_TARGET else 'MISSED'}",
               f"bytes {w_ratio:.2f}x <= {BYTES_TARGET}: {'met' if w_ratio <= BYTES_TARGET else 'MISSED'}",
               f"read {r_ratio:.2f}x <= {READ_TARGET}: {'met' if r_ratio <= READ_TARGET else 'MISSED'}",
               f"maintained read {m_ratio:.2f}x <= {MAINTAINED_TARGET}: "
               f"{'met' if m_ratio <= MAINTAINED_TARGET else 'MISSED'}"]
    return (f"SUMMARY mirror growth ({changes:,} row changes per run, {runs} runs per size, 4 tables):\n"
            + "\n".join(lines) + "\n  targets: " + "; ".join(verdict))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--live", type=_sizes, default=[500_000, 5_000_000],
                    help="live rows of the 4 mirrors together, comma-separated increasing (default 500K,5M)")
    ap.add_argument("--changes", type=int, default=20_000, help="row changes per incremental run (default 20000)")
    ap.add_argument("--runs", type=int, default=RUNS, help=f"incremental runs per size (default {RUNS})")
    ap.add_argument("--mode", choices=["merge-on-read", "merge-on-read-unfolded", "copy-on-write"],
                    default="merge-on-read",
                    help="the mirrors' write.merge.mode for the timed runs (copy-on-write: binlake before issue 56; "
                         "merge-on-read-unfolded: with binlake.merge.fold=false)")
    ap.add_argument("--base", choices=["mixed", "inserts"], default="mixed",
                    help="the load that grows each size's base: the runs' mix (default) or inserts only "
                         "(half the row changes to generate: for the 20M size)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args(argv)
    phases: list[int] = []
    inserts: list[float] = []
    base_share, base_live = (1.0, 1.0) if args.base == "inserts" else (MIX_INSERTS, LIVE_PER_CHANGE)
    live = 0.0
    for size in args.live:
        phases.append(int((size - live) / base_live))
        inserts.append(base_share)
        live = size + args.runs * args.changes * LIVE_PER_CHANGE
        phases.extend([args.changes] * args.runs)
        inserts.extend([MIX_INSERTS] * args.runs)
    print(f"mirror growth  {dt.datetime.now(UTC):%Y-%m-%d %H:%M UTC}  {machine_line()}  load average {_load_avg()}"
          f"  base: {args.base}")
    with cluster("binlake-bench-growth-", args.keep) as (root, env):
        print(f"  {sum(phases):,} row changes to generate over {len(phases)} phases", flush=True)
        loads = generate(env, phases, args.seed, inserts)
        results = []
        for i, size in enumerate(args.live):
            block = loads[i * (args.runs + 1):(i + 1) * (args.runs + 1)]
            results.append(one_size(env, root, root / "wh", size, block[0], block[1:], args.mode))
        print()
        print(f"mode: {args.mode}")
        print(summary(results, args.changes, args.runs))
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""``binlake drain --dry-run --write-plan`` against the Iceberg sink prints the sink's write plan of
the range (per table: the changelog's and the mirror's part) on a real pull and decode, and writes
nothing: no catalog on a warehouse never written, no new table or snapshot on one that was. A plain
``--dry-run`` stays the range and the pumps (no Spark)."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from binlake.drain import run_drain_command
from tests.drain.conftest import Env

pytestmark = pytest.mark.integration


def _state(catalog: Catalog) -> dict[str, tuple[str, int | None]]:
    out = {}
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            tbl = catalog.load_table(ident)
            snap = tbl.current_snapshot()
            out[".".join(ident)] = (tbl.metadata_location, snap.snapshot_id if snap else None)
    return out


def test_a_dry_run_prints_the_iceberg_write_plan_and_writes_nothing(env: Env) -> None:
    env.sql("create table a (id int primary key, v varchar(8))")
    env.sql("insert into a values (1, 'x'), (2, 'y')")
    env.settle()
    out = io.StringIO()
    report = run_drain_command(env.options, dry_run=True, out=out)          # the range only: no Spark
    assert report.kind == "plan" and "write plan" not in out.getvalue() and "[pull]" not in out.getvalue()
    out = io.StringIO()
    report = run_drain_command(env.options, dry_run=True, out=out, write_plan=True)
    text = out.getvalue()
    assert report.kind == "plan" and "iceberg write plan (0, " in text
    assert "changelog test.a__changelog: create, append rows after 0" in text
    assert "mirror test.a: create, merge changes after 0, 16 bucket(s), no files yet" in text
    assert not Path(env.options.iceberg.warehouse).exists()           # no catalog, no table

    first = env.drain()
    env.sql("create table b (id int primary key)")
    env.sql("insert into b values (7); update a set v = 'z' where id = 1")
    env.sql("alter table a add column n int default 3")
    env.settle()
    catalog = env.catalog()
    before = _state(catalog)
    out = io.StringIO()
    report = run_drain_command(env.options, dry_run=True, out=out, write_plan=True)
    text = out.getvalue()
    assert report.checkpoint_before == first["to_ts"] == report.from_ts
    assert f"iceberg write plan ({first['to_ts']}, {report.to_ts}]: 2 table(s)" in text
    assert f"changelog test.a__changelog: append rows after {first['to_ts']}, evolve: add_column(" in text
    assert "16 bucket(s), 1 file(s) in 1 bucket(s), backfill: every file rewritten" in text   # a's default to fill
    assert "mirror test.b: create, merge changes after" in text
    assert _state(env.catalog()) == before                             # no new table, snapshot or metadata
    assert "test.b" not in before and "test.b__changelog" not in before

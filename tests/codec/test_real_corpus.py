"""Decoder regression over binlogs real TiDBs sent (``corpus/tidb-<line>``, one per tidb-server build,
recorded by ``python -m tests.realtidb.record_corpus --build LINE``): every row mutation is decoded by
binlake's codec with the schema the Drainer's history gives it, replayed in commit order, and each
table's final state must equal what TiDB itself returned over its MySQL port. No servers; seconds."""
from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ingest import binlog as bl
from schemas import binlog_pb2
from tests.codec import corpus
from transform.codec import mysqltypes as mt
from transform.codec.batch import decode_batch
from transform.codec.convert import convert_value
from transform.codec.model import TableInfo
from transform.codec.rows import DELETE, INSERT, decode_row, iter_mutation
from transform.codec.values import missing_value
from transform.history import CommitOrder, SchemaHistory, replaced_columns

CORPORA = sorted(p for p in (Path(__file__).parent / "corpus").iterdir() if (p / corpus.META).exists())
CORPUS = next(p for p in CORPORA if p.name == "tidb-v7.0")   # the one the corruption tests change

# Tables that differ because of a known binlake gap (strict: the mark must go once the gap is closed).
@dataclass(frozen=True)
class Txn:
    """A committed transaction: its prewrite binlog and where it committed."""

    start_ts: int
    commit_ts: int
    prewrite: binlog_pb2.Binlog


@dataclass
class Replayed:
    """Every table id's rows after the whole corpus (handle → column id → value), and the history."""

    history: SchemaHistory
    rows: dict[int, dict[Any, dict[int, Any]]]
    decoded: int


def load_binlogs(directory: Path) -> list[binlog_pb2.Binlog]:
    """The corpus's binlogs, parsed, in stored order."""
    return [bl.parse(p) for p in corpus.read_binlogs(directory / corpus.BINLOGS)]


def committed(binlogs: list[binlog_pb2.Binlog]) -> list[Txn]:
    """Prewrites paired with their commits, in commit order; rollbacks (commit_ts 0), fakes and
    prewrites that never committed are dropped."""
    prewrites: dict[int, binlog_pb2.Binlog] = {}
    commits: dict[int, int] = {}
    for b in binlogs:
        if b.tp == bl.PREWRITE:
            assert b.start_ts not in prewrites, f"two prewrites of start_ts {b.start_ts}"
            prewrites[b.start_ts] = b
        elif b.tp == bl.COMMIT:
            assert commits.get(b.start_ts, b.commit_ts) == b.commit_ts, f"two commit ts for {b.start_ts}"
            commits[b.start_ts] = b.commit_ts
    missing = sorted(set(commits) - set(prewrites))
    assert not missing, f"commits without a prewrite: {missing[:5]}"
    return sorted((Txn(s, c, prewrites[s]) for s, c in commits.items()), key=lambda t: t.commit_ts)


def commit_order(txns: list[Txn]) -> CommitOrder:
    """Where each DDL job's binlog committed (the delete-only state's extra binlog does not count)."""
    return CommitOrder(0, {t.prewrite.ddl_job_id: t.commit_ts for t in txns
                           if t.prewrite.ddl_job_id and t.prewrite.ddl_schema_state != mt.STATE_DELETE_ONLY})


def replay(directory: Path) -> Replayed:
    """Decode every DML of the corpus with the schema in force at its commit position and apply it
    by handle in commit order (within a transaction in binlog order)."""
    history = SchemaHistory.from_json(json.loads((directory / corpus.DDL_HISTORY).read_bytes()))
    txns = committed(load_binlogs(directory))
    order = commit_order(txns)
    state: dict[int, dict[Any, dict[int, Any]]] = {}
    decoded = 0
    for t in txns:
        if t.prewrite.ddl_job_id:
            if order.ddl_commits.get(t.prewrite.ddl_job_id) == t.commit_ts:
                rewrite_columns(history, state, t.prewrite.ddl_job_id)
            continue
        pv = binlog_pb2.PrewriteValue.FromString(t.prewrite.prewrite_value)
        for m in pv.mutations:
            version = history.version_in_force(m.table_id, pv.schema_version, t.commit_ts, order)
            assert version is not None and version.table is not None, \
                f"txn {t.start_ts}@{t.commit_ts}: no live table id {m.table_id} at version {pv.schema_version}"
            table = version.table
            rows = state.setdefault(m.table_id, {})
            for kind, data in iter_mutation(m):
                ch = decode_row(table, kind, data)
                decoded += 1
                if kind == DELETE:
                    assert ch.handle in rows, f"{table.name}: delete of absent key {ch.handle!r} at {t.commit_ts}"
                    del rows[ch.handle]
                    continue
                if kind != INSERT:
                    rows.pop(ch.old_handle, None)
                assert ch.after is not None
                rows[ch.handle] = {c.id: ch.after[c.name] for c in table.columns}
    return Replayed(history, state, decoded)


def rewrite_columns(history: SchemaHistory, state: dict[int, dict[Any, dict[int, Any]]], job_id: int) -> None:
    """A MODIFY COLUMN TiDB ran as a reorg (a new column id, backfilled without binlogs): every row
    of the table takes the old column's value converted as TiDB converted it, as the Iceberg
    mirror does (``transform.codec.convert``)."""
    job = history.job(job_id)
    versions = history.versions(job.table_id)
    at = next((i for i, v in enumerate(versions) if v.job.id == job_id), None)
    if not at or versions[at].table is None:
        return
    for old, new in replaced_columns(versions[at - 1].table, job, versions[at].table):
        for row in state.get(job.table_id, {}).values():
            if old.id in row and new.id not in row:
                row[new.id] = convert_value(row.pop(old.id), old, new)


def final_tables(replayed: Replayed) -> dict[str, tuple[TableInfo, dict[Any, dict[int, Any]]]]:
    """``db.table`` → (its final TableInfo, rows) for every table id still live at the end."""
    out = {}
    for tid, rows in replayed.rows.items():
        last = replayed.history.versions(tid)[-1]
        if last.table is not None:
            out[f"{last.db}.{last.table.name}"] = (last.table, rows)
    return out


def rendered(table: TableInfo, spec: dict[str, Any], rows: dict[Any, dict[int, Any]]) -> list[list[str | None]]:
    """Rows in expected.json's column order and canonical form, sorted as the recorder sorts them."""
    by_name = {c.name.lower(): c for c in table.columns}
    cols = [by_name[c["name"].lower()] for c in spec["columns"]]
    out = []
    for handle, row in rows.items():
        values = [corpus.render(c, row[c.id] if c.id in row else missing_value(c)) for c in cols]
        if spec["rowid"]:
            values.append(str(handle))
        out.append(values)
    out.sort(key=lambda r: json.dumps(r))
    return out


def differences(name: str, table: TableInfo | None, spec: dict[str, Any], got: list[list[str | None]]) -> list[str]:
    """What differs between TiDB's rows of a table and the replayed ones, first rows first."""
    want: list[list[str | None]] = spec["rows"]
    names = [c["name"] for c in spec["columns"]] + ([corpus.ROWID] if spec["rowid"] else [])
    if table is None:
        return [f"{name}: no DML decoded for this table (TiDB has {len(want)} rows)"] if want else []
    by_name = {c.name.lower(): c for c in table.columns}
    cols = [by_name[n.lower()] for n in names if n != corpus.ROWID]

    def equal(a: list[str | None], b: list[str | None]) -> bool:
        return len(a) == len(b) and all(corpus.same(c, x, y) for c, x, y in zip(cols, a, b)) and \
            a[len(cols):] == b[len(cols):]

    out = []
    unmatched = list(got)
    for w in want:
        hit = next((i for i, g in enumerate(unmatched) if equal(w, g)), None)
        if hit is None:
            near = min(unmatched, key=lambda g: sum(not corpus.same(c, x, y) for c, x, y in zip(cols, w, g)),
                       default=None)
            cells = "" if near is None else "; ".join(
                f"{n}: TiDB {x!r} binlake {y!r}" for n, x, y in zip(names, w, near) if x != y)
            out.append(f"{name}: TiDB row {dict(zip(names, w))} not replayed (nearest differs in {cells})")
        else:
            unmatched.pop(hit)
    out += [f"{name}: replayed row {dict(zip(names, g))} is not in TiDB" for g in unmatched]
    return out


def stored_columns(spec: dict[str, Any]) -> dict[str, Any]:
    """A table of expected.json without its virtual generated columns (``extra`` says ``VIRTUAL
    GENERATED``): TiDB computes them on read and never writes them to a binlog, so the lake leaves
    them out, as ``binlake verify`` does when it reads TiDB."""
    keep = [i for i, c in enumerate(spec["columns"]) if "VIRTUAL GENERATED" not in c["extra"].upper()]
    n = len(spec["columns"])
    return dict(spec, columns=[spec["columns"][i] for i in keep],
                rows=[[r[i] for i in keep] + r[n:] for r in spec["rows"]])


def expected_tables(directory: Path) -> dict[str, Any]:
    """expected.json's tables."""
    doc: dict[str, Any] = json.loads((directory / corpus.EXPECTED).read_text())
    return doc


@functools.cache
def replayed(directory: Path) -> Replayed:
    """A corpus, replayed once for every table's test."""
    return replay(directory)


def _cases() -> Iterator[Any]:
    for directory in CORPORA:
        for name in sorted(expected_tables(directory)):
            yield pytest.param(directory, name, id=f"{directory.name}-{name}")


every_corpus = pytest.mark.parametrize("directory", CORPORA, ids=[p.name for p in CORPORA])


def test_there_is_a_corpus_per_build() -> None:
    """Each tidb-server build the real-TiDB tier runs has its recorded corpus."""
    from tests.realtidb.versions import BUILDS

    assert {p.name for p in CORPORA} >= {f"tidb-{b.line}" for b in BUILDS}


@every_corpus
def test_corpus_is_what_tidb_sent(directory: Path) -> None:
    """The corpus holds prewrites, commits, a rollback with commit_ts 0 and fakes, with a DDL history."""
    binlogs = load_binlogs(directory)
    meta = json.loads((directory / corpus.META).read_text())
    assert len(binlogs) == meta["binlogs"]
    kinds = {bl.PREWRITE: 0, bl.COMMIT: 0, bl.ROLLBACK: 0}
    for b in binlogs:
        kinds[b.tp] += 1
    assert kinds[bl.PREWRITE] and kinds[bl.COMMIT]
    assert any(b.tp == bl.ROLLBACK and b.commit_ts == 0 for b in binlogs)
    assert any(bl.is_fake(b.tp, b.start_ts, b.commit_ts) for b in binlogs)
    assert len(committed(binlogs)) == kinds[bl.COMMIT]


def dml_mutations(directory: Path) -> Iterator[tuple[Txn, binlog_pb2.TableMutation, Any, Any]]:
    """Every table mutation of the corpus's committed DML transactions, with the table version it was
    written under and the one in force at its commit (``SchemaHistory.version_in_force``)."""
    history = SchemaHistory.from_json(json.loads((directory / corpus.DDL_HISTORY).read_bytes()))
    txns = committed(load_binlogs(directory))
    order = commit_order(txns)
    for t in txns:
        if t.prewrite.ddl_job_id:
            continue
        pv = binlog_pb2.PrewriteValue.FromString(t.prewrite.prewrite_value)
        for m in pv.mutations:
            written = history.version_at(m.table_id, pv.schema_version)
            in_force = history.version_in_force(m.table_id, pv.schema_version, t.commit_ts, order)
            assert written is not None and in_force is not None
            yield t, m, written, in_force


@every_corpus
def test_corpus_has_dml_committed_after_a_newer_ddl(directory: Path) -> None:
    """The corpus holds transactions written under an older schema version that committed after a
    DDL on their table (the race of writers and ADD/DROP COLUMN): they are decoded with the newer
    table. The v6.4 build refuses them instead."""
    late = [(written, in_force) for _, _, written, in_force in dml_mutations(directory)
            if in_force.schema_version != written.schema_version]
    race = json.loads((directory / corpus.META).read_text())["race"]
    if race["failed"]:   # this TiDB refused them ("Information schema is changed"): none committed late
        assert not late, f"{len(late)} DML committed after a newer DDL although TiDB refused the race's"
        return
    assert late, "no DML of the corpus committed after a newer DDL on its table"
    assert any(w.table is not None and i.table is not None and len(i.table.columns) < len(w.table.columns)
               for w, i in late), "none of them committed after a DROP COLUMN"


@pytest.mark.parametrize(("directory", "name"), list(_cases()))
def test_table_matches_tidb(directory: Path, name: str) -> None:
    """A table replayed from the decoded binlogs holds exactly the rows TiDB returned, and no column
    for a virtual generated one."""
    full = expected_tables(directory)[name]
    spec = stored_columns(full)
    table, rows = final_tables(replayed(directory)).get(name, (None, {}))
    virtual = {c["name"].lower() for c in full["columns"]} - {c["name"].lower() for c in spec["columns"]}
    held = [c.name for c in table.columns if c.name.lower() in virtual] if table is not None else []
    assert not held, f"{name}: the lake's table holds the virtual generated column(s) {held}"
    got = rendered(table, spec, rows) if table is not None else []
    diffs = differences(name, table, spec, got)
    assert not diffs, "\n".join(diffs[:10])


@every_corpus
def test_batch_decoder_agrees_with_decode_row(directory: Path) -> None:
    """The Drainer's vectorised decoder gives every row of the corpus the image ``decode_row`` gives
    (BIT is an int64 in Arrow: its bit pattern is compared)."""
    diffs = []
    for t, m, _, version in dml_mutations(directory):
        assert version.table is not None
        table = version.table
        rows = list(iter_mutation(m))
        batch = decode_batch(table, [k for k, _ in rows], [p for _, p in rows])
        for i, (kind, data) in enumerate(rows):
            ch = decode_row(table, kind, data)
            image = ch.before if kind == DELETE else ch.after
            assert image is not None
            for c in table.columns:
                value = batch.column(c.name)[i].as_py()
                if c.family == mt.Family.BIT and value is not None:
                    value &= (1 << 64) - 1
                scalar, vector = corpus.render(c, image[c.name]), corpus.render(c, value)
                if not corpus.same(c, scalar, vector):
                    diffs.append(f"{table.name}.{c.name} at {t.commit_ts} row {i}: decode_row {scalar!r}, "
                                 f"decode_batch {vector!r}")
    assert not diffs, "\n".join(diffs[:10])


def test_a_flipped_datum_byte_is_caught(tmp_path: Path) -> None:
    """A copy of the corpus with one byte of one datum changed replays to a table TiDB does not have."""
    for f in (corpus.DDL_HISTORY, corpus.EXPECTED, corpus.META):
        (tmp_path / f).write_bytes((CORPUS / f).read_bytes())
    binlogs = [bytes(p) for p in corpus.read_binlogs(CORPUS / corpus.BINLOGS)]
    history = SchemaHistory.from_json(json.loads((CORPUS / corpus.DDL_HISTORY).read_bytes()))
    target = "corpus.ubig"
    changed = None
    for i, payload in enumerate(binlogs):
        b = bl.parse(payload)
        if b.tp != bl.PREWRITE or b.ddl_job_id:
            continue
        pv = binlog_pb2.PrewriteValue.FromString(b.prewrite_value)
        for m in pv.mutations:
            v = history.version_at(m.table_id, pv.schema_version)
            if v is None or v.table is None or f"{v.db}.{v.table.name}" != target or not m.inserted_rows:
                continue
            row = bytearray(m.inserted_rows[1])   # (9223372036854775807, 'max63'): never changed later
            row[-1] ^= 0x01            # the last byte of the last column's datum (the v string)
            m.inserted_rows[1] = bytes(row)
            b.prewrite_value = pv.SerializeToString()
            binlogs[i] = b.SerializeToString()
            changed = i
            break
        if changed is not None:
            break
    assert changed is not None, f"no insert into {target} in the corpus"
    corpus.write_binlogs(tmp_path / corpus.BINLOGS, binlogs)
    spec = expected_tables(tmp_path)[target]
    table, rows = final_tables(replay(tmp_path))[target]
    diffs = differences(target, table, spec, rendered(table, spec, rows))
    assert diffs and "not replayed" in diffs[0], diffs


def test_a_wrong_expectation_is_reported() -> None:
    """A changed expected value is reported with the column that differs."""
    spec = json.loads(json.dumps(expected_tables(CORPUS)["corpus.scalars"]))
    spec["rows"][0][spec["columns"].index(next(c for c in spec["columns"] if c["name"] == "dc65"))] = "1.5"
    table, rows = final_tables(replay(CORPUS))["corpus.scalars"]
    diffs = differences("corpus.scalars", table, spec, rendered(table, spec, rows))
    assert any("dc65: TiDB '1.5'" in d for d in diffs), diffs

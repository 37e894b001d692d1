"""A seeded workload generator: realistic mixed transactions over several tables covering every column
type, DDL changes while running, and a key-churn mode (deletes and re-inserts, primary-key changes).

Transactions are built as statement objects (no SQL parsing on the hot path) and run through the
normal session/2PC path, so they produce exactly the binlogs SQL would. Each worker owns a disjoint
key space, so workers never conflict with each other; DDL on ``wl_ddl`` may abort a transaction
(schema changed), which is counted, not retried.
"""
from __future__ import annotations

import datetime as dt
import random
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from upstream import sql as S
from upstream.errors import ServerCrashed, TxnAborted
from upstream.exprs import Cmp, Col, Lit

TABLES_SQL = [
    """create table if not exists wl_orders (
        id bigint primary key, customer varchar(32) not null, amount decimal(12,2),
        status enum('new','paid','shipped') not null default 'new',
        tags set('a','b','c'), created datetime(3), ts timestamp(6) null, note text, payload json, flags bit(8),
        qty smallint unsigned default 1, ratio double, score float, d date, t time(3), y year, bin varbinary(16),
        fixed binary(4), c char(5), tiny tinyint, med mediumint, big bigint unsigned)""",
    "create table if not exists wl_events (k varchar(20), seq int, v bigint, note varchar(40), "
    "primary key (k, seq) clustered)",
    "create table if not exists wl_log (a int, b varchar(10), c double, key ia (a))",
    "create table if not exists wl_ddl (id int primary key, v int)",
]

DDL_CYCLE = [
    "alter table wl_ddl add column extra{n} int default {n}",
    "alter table wl_ddl modify column extra{n} bigint default {n}",
    "alter table wl_ddl rename column extra{n} to renamed{n}",
    "alter table wl_ddl drop column renamed{n}",
]


@dataclass
class Stats:
    """Counts of one run."""

    committed: int = 0
    aborted: int = 0
    crashed: int = 0
    rows: int = 0
    ddls: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def tps(self) -> float:
        """Committed transactions per second."""
        return self.committed / self.seconds if self.seconds else 0.0


class _Worker:
    def __init__(self, index: int, workers: int, seed: int, churn: bool) -> None:
        self.rng = random.Random(seed * 1000 + index)
        self.index = index
        self.workers = workers
        self.churn = churn
        self.next = 0
        self.orders: list[int] = []
        self.events: list[tuple[str, int]] = []

    def new_id(self) -> int:
        self.next += 1
        return self.next * self.workers + self.index + 1

    def order_row(self, oid: int) -> list[Any]:
        r = self.rng
        base = dt.datetime(2024, 1, 1) + dt.timedelta(seconds=r.randrange(0, 86400 * 365),
                                                      milliseconds=r.randrange(1000))
        return [oid, f"cust-{r.randrange(1000)}", Decimal(r.randrange(-10**8, 10**8)) / 100,
                r.choice(["new", "paid", "shipped"]), r.choice(["", "a", "a,b", "b,c", "a,b,c"]), base,
                dt.datetime(2024, 6, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=r.randrange(10**12)),
                r.choice(["", "hello", "ünïcödé ✓", "x" * r.randrange(50)]) if r.random() < 0.9 else None,
                r.choice(['{"a": 1}', '[1, 2, "x"]', '{"k": {"n": null, "b": true}}', '"s"', "3.5"]),
                r.randrange(256), r.randrange(65536), r.uniform(-1e6, 1e6), float(r.randrange(-1000, 1000)) / 4,
                dt.date(2000, 1, 1) + dt.timedelta(days=r.randrange(10000)),
                f"{r.randrange(-838, 838)}:{r.randrange(60):02d}:{r.randrange(60):02d}.{r.randrange(1000):03d}",
                r.choice([0, 1901, 1999, 2024, 2155]), bytes(r.randrange(256) for _ in range(r.randrange(16))),
                bytes(r.randrange(256) for _ in range(4)), r.choice(["", "ab", "abcde"]), r.randrange(-128, 128),
                r.randrange(-2**23, 2**23), r.randrange(2**64)]

    def ops(self, n: int) -> tuple[list[S.Statement], Any]:
        """``n`` row operations and the bookkeeping to apply when they commit."""
        stmts: list[S.Statement] = []
        r = self.rng
        orders, events = list(self.orders), list(self.events)
        for _ in range(n):
            x, c = r.random(), r.random()
            if self.churn and orders and c < 0.15:          # delete and re-insert the same key
                oid = r.choice(orders)
                stmts.append(S.Delete(None, "wl_orders", Cmp("=", Col("id"), Lit(oid))))
                stmts.append(S.Insert(None, "wl_orders", None, [self.order_row(oid)]))
            elif self.churn and orders and c < 0.3:         # primary-key change
                oid = r.choice(orders)
                nid = self.new_id()
                stmts.append(S.Update(None, "wl_orders", [("id", Lit(nid))], Cmp("=", Col("id"), Lit(oid))))
                orders[orders.index(oid)] = nid
            elif x < 0.35 or not orders:
                oid = self.new_id()
                stmts.append(S.Insert(None, "wl_orders", None, [self.order_row(oid)]))
                orders.append(oid)
            elif x < 0.55:
                oid = r.choice(orders)
                stmts.append(S.Update(None, "wl_orders", [("amount", Lit(Decimal(r.randrange(10**6)) / 100)),
                                                          ("status", Lit(r.choice(["paid", "shipped"])))],
                                      Cmp("=", Col("id"), Lit(oid))))
            elif x < 0.62 and len(orders) > 20:
                oid = r.choice(orders)
                stmts.append(S.Delete(None, "wl_orders", Cmp("=", Col("id"), Lit(oid))))
                orders.remove(oid)
            elif x < 0.78:
                key = (f"k{self.index}-{r.randrange(50)}", self.new_id())
                stmts.append(S.Insert(None, "wl_events", None, [[key[0], key[1], r.randrange(2**40), "ev"]]))
                events.append(key)
            elif x < 0.85 and events:
                k = r.choice(events)
                stmts.append(S.Update(None, "wl_events", [("v", Lit(r.randrange(100)))],
                                      S.expr_and(Cmp("=", Col("k"), Lit(k[0])), Cmp("=", Col("seq"), Lit(k[1])))))
            elif x < 0.93:
                stmts.append(S.Insert(None, "wl_log", ["a", "b", "c"], [[r.randrange(100), "log", r.random()]]))
            else:
                did = self.new_id()
                stmts.append(S.Insert(None, "wl_ddl", ["id", "v"], [[did, r.randrange(1000)]]))
        return stmts, (orders, events)

    def applied(self, after: Any) -> None:
        self.orders, self.events = after


class Workload:
    """Runs the generator against a cluster (servers used round-robin by worker)."""

    def __init__(self, cluster: Any, seed: int = 1, churn: bool = False, rows_per_txn: int = 5,
                 ddl_interval: float = 5.0, db: str = "test") -> None:
        self.cluster = cluster
        self.seed = seed
        self.churn = churn
        self.rows_per_txn = rows_per_txn
        self.ddl_interval = ddl_interval
        self.db = db
        self.stop = threading.Event()

    def setup(self) -> None:
        """Create the workload's tables (idempotent)."""
        for stmt in TABLES_SQL:
            self.cluster.server(0).execute(stmt, self.db)

    def run(self, rate: float = 100.0, duration: float = 10.0, workers: int = 4, max_txns: int = 0) -> Stats:
        """Run for ``duration`` seconds (or ``max_txns`` transactions, or until ``stop``) at ``rate`` txn/s."""
        stats = Stats()
        lock = threading.Lock()
        started = time.monotonic()
        deadline = started + duration if duration > 0 else float("inf")
        per_worker = rate / workers if rate > 0 else 0.0

        def work(i: int) -> None:
            w = _Worker(i, workers, self.seed, self.churn)
            server = self.cluster.server(i % len(self.cluster.servers))
            session = server.session(self.db)
            n = 0
            while not self.stop.is_set() and time.monotonic() < deadline:
                if max_txns:
                    with lock:
                        if stats.committed + stats.aborted + stats.crashed >= max_txns:
                            return
                stmts, after = w.ops(self.rows_per_txn)
                try:
                    session.run(S.Begin())
                    for s in stmts:
                        session.run(s)
                    session.run(S.Commit())
                    w.applied(after)
                    with lock:
                        stats.committed += 1
                        stats.rows += len(stmts)
                except ServerCrashed:
                    w.applied(after)
                    with lock:
                        stats.crashed += 1
                except TxnAborted:
                    session.txn = None
                    with lock:
                        stats.aborted += 1
                except Exception as e:  # noqa: BLE001 - recorded; the run goes on
                    session.txn = None
                    with lock:
                        stats.errors.append(f"{type(e).__name__}: {e}")
                n += 1
                if per_worker:
                    lag = started + n / per_worker - time.monotonic()
                    if lag > 0:
                        self.stop.wait(lag)

        def ddl() -> None:
            k = 0
            while not self.stop.wait(self.ddl_interval) and time.monotonic() < deadline:
                stmt = DDL_CYCLE[k % len(DDL_CYCLE)].format(n=k // len(DDL_CYCLE))
                try:
                    self.cluster.server(0).execute(stmt, self.db)
                    with lock:
                        stats.ddls += 1
                except Exception as e:  # noqa: BLE001 - recorded; the workload goes on
                    with lock:
                        stats.errors.append(f"DDL {stmt}: {e}")
                k += 1

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
        if self.ddl_interval > 0:
            threads.append(threading.Thread(target=ddl, daemon=True))
        for t in threads:
            t.start()
        for t in threads[:workers]:
            t.join()
        self.stop.set()
        for t in threads[workers:]:
            t.join()
        stats.seconds = time.monotonic() - started
        return stats

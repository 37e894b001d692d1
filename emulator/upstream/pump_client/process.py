"""``ProcessPumpsClient``: a ``PumpsClient`` that runs in a child process.

For a writer whose own process is CPU-bound on one GIL (the upstream emulator): the gRPC framing,
the pump connections and their reader threads, retries and the registry watch all run in the child,
which can use another core. The parent keeps one local socket to it: a binlog goes down as one
message, and an answer comes back. Answers to commits and rollbacks are not urgent (nobody waits
for them), so the child sends them along with the next prewrite answer, or within ``COMMIT_ANSWER_DELAY``.

Same write API and promises as ``PumpsClient``: ``write_binlog``, ``start_prewrite`` (its
``result()`` waits), ``write_commit_async`` (a Future-like answer that never raises for a write
failure), ``flush``, ``close``. The child's ``PumpClientError``s are raised again in the parent with
the same class and message. If the child dies, every call in flight and every later call fails with
``PumpClientClosed`` that says so; a prewrite never counts as stored unless the child said it was.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ingest import errors as ingest_errors
from schemas import binlog_pb2
from upstream.pump_client import errors as E

log = logging.getLogger(__name__)

COMMIT_ANSWER_DELAY = 0.005      # seconds a commit's answer may wait for company
START_TIMEOUT = 60.0             # the child must be ready (registry read, pumps found) within this
_HEAD = struct.Struct("<IBQ")    # payload length, kind, request id
_PREWRITE, _COMMIT, _CLOSE = 1, 2, 3       # requests
_STORED, _FAILED, _READY = 1, 2, 3         # answers
_MAX_INFLIGHT_PREWRITES = 256              # child threads waiting on prewrite answers


def _read_messages(sock: socket.socket, handle: Callable[[int, int, bytes], bool]) -> None:
    """Read framed messages until EOF or until ``handle`` returns False."""
    buf = b""
    while True:
        data = sock.recv(1 << 20)
        if not data:
            return
        buf = buf + data if buf else data
        pos, n = 0, len(buf)
        while n - pos >= _HEAD.size:
            length, kind, ident = _HEAD.unpack_from(buf, pos)
            end = pos + _HEAD.size + length
            if end > n:
                break
            if not handle(kind, ident, buf[pos + _HEAD.size:end]):
                return
            pos = end
        buf = buf[pos:]


class _Sender:
    """Writes messages in order from any thread: whoever finds nobody writing sends all that is
    queued; ``lazy`` messages wait for the next eager one (or ``flush``)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self._out: list[bytes] = []
        self._writing = False

    def send(self, kind: int, ident: int, payload: bytes = b"", lazy: bool = False) -> None:
        with self._lock:
            self._out.append(_HEAD.pack(len(payload), kind, ident) + payload)
            if self._writing or lazy:
                return
            self._writing = True
        self._drain()

    def flush(self) -> None:
        with self._lock:
            if self._writing or not self._out:
                return
            self._writing = True
        self._drain()

    def _drain(self) -> None:
        try:
            while True:
                with self._lock:
                    out, self._out = self._out, []
                    if not out:
                        self._writing = False
                        return
                self._sock.sendall(b"".join(out))
        except BaseException:
            with self._lock:
                self._writing = False
            raise


def _error_payload(exc: BaseException) -> bytes:
    return f"{type(exc).__name__}\x00{exc}".encode("utf-8", "replace")


def _error_from(payload: bytes) -> Exception:
    """The exception the child reported: its own class where that is one of ours or ValueError (a
    refused request), otherwise ``PumpClientError`` naming it."""
    name, _, message = payload.decode("utf-8", "replace").partition("\x00")
    cls = getattr(E, name, None) or getattr(ingest_errors, name, None)
    if isinstance(cls, type) and issubclass(cls, (E.PumpClientError, ingest_errors.IngestError)):
        return cls(message)
    if name == "ValueError":
        return ValueError(message)
    return E.PumpClientError(f"{name}: {message}")


# ---- the child ------------------------------------------------------------------------------------

def _child_main(sock: socket.socket, registry: str, cluster_id: int, options: dict[str, Any],
                cpus: set[int] | None) -> None:
    """The child: a PumpsClient serving the parent's requests until CLOSE or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent decides when to stop
    if cpus:
        os.sched_setaffinity(0, cpus)
    from upstream.pump_client.client import PumpsClient

    sender = _Sender(sock)
    try:
        client = PumpsClient(registry, cluster_id, **options)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        sender.send(_FAILED, 0, _error_payload(exc))
        sock.close()
        return
    sender.send(_READY, 0)
    pool = ThreadPoolExecutor(max_workers=_MAX_INFLIGHT_PREWRITES, thread_name_prefix="prewrite-wait")
    stop = threading.Event()

    def answer(ident: int, get: Callable[[], str | None], lazy: bool) -> None:
        try:
            node = get()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            sender.send(_FAILED, ident, _error_payload(exc), lazy)
            return
        sender.send(_STORED, ident, (node or "").encode(), lazy)

    def handle(kind: int, ident: int, payload: bytes) -> bool:
        if kind == _CLOSE:
            return False
        try:
            binlog = binlog_pb2.Binlog.FromString(payload)
            if kind == _PREWRITE:
                pending = client.start_prewrite(binlog)
                pool.submit(answer, ident, pending.result, False)
            else:
                fut = client.write_commit_async(binlog)
                fut.add_done_callback(lambda f: answer(ident, f.result, True))
        except BaseException as exc:  # noqa: BLE001 - a refused request fails that request only
            sender.send(_FAILED, ident, _error_payload(exc))
        return True

    def tick() -> None:
        while not stop.wait(COMMIT_ANSWER_DELAY):
            sender.flush()

    ticker = threading.Thread(target=tick, name="commit-answers", daemon=True)
    ticker.start()
    try:
        _read_messages(sock, handle)
    except OSError:
        pass
    finally:
        client.flush(client.write_timeout + 1.0)
        pool.shutdown(wait=True)
        client.close()
        stop.set()
        ticker.join()
        try:
            sender.flush()
        except OSError:
            pass
        sock.close()


# ---- the parent -----------------------------------------------------------------------------------

_CALLBACKS = threading.Lock()   # orders when_answered against _settle, for every answer


class _Answer:
    """One request's answer: ``result(timeout)`` waits for it (Future-like, with ``done``), and
    ``when_answered(fn)`` calls ``fn()`` once it is in."""

    __slots__ = ("_waiter", "_value", "_error", "_done", "_callbacks")

    def __init__(self) -> None:
        self._waiter = threading.Lock()
        self._waiter.acquire()
        self._value: str | None = None
        self._error: BaseException | None = None
        self._done = False
        self._callbacks: list[Callable[[], None]] | None = None

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> str | None:
        if not self._done:
            if not self._waiter.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
                raise TimeoutError("no answer from the pump client process yet")
            self._waiter.release()
        if self._error is not None:
            raise self._error
        return self._value

    def when_answered(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` (no arguments) once the answer is in: now if it is, else on the thread that
        settles it, the client's answer reader, so ``fn`` must not block: in particular it must not
        wait for another answer of this client."""
        with _CALLBACKS:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        _call(fn)

    def _settle(self, value: str | None, error: BaseException | None) -> None:
        self._value, self._error = value, error
        with _CALLBACKS:
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        self._waiter.release()
        for fn in callbacks or ():
            _call(fn)


def _call(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        log.exception("pump client answer callback failed")


class ProcessPumpsClient:
    """A ``PumpsClient`` in a child process (``options`` are ``PumpsClient``'s keyword arguments;
    TLS credentials cannot cross the process boundary). ``cpus``: the child's CPU affinity.
    Construction waits until the child has read the registry: ``NoPumpFound`` and the like are raised here."""

    def __init__(self, registry: str, cluster_id: int, *, cpus: set[int] | None = None,
                 start_timeout: float = START_TIMEOUT, **options: Any) -> None:
        if not isinstance(registry, str):
            raise TypeError("ProcessPumpsClient needs the registry as a URI (file://… or etcd://…)")
        if options.get("credentials") is not None:
            raise ValueError("ProcessPumpsClient cannot carry TLS credentials to its child; use PumpsClient")
        self.write_timeout = float(options.get("write_timeout", 15.0))
        parent, child = socket.socketpair()
        ctx = mp.get_context("spawn")
        self._proc = ctx.Process(target=_child_main, args=(child, registry, cluster_id, options, cpus),
                                 name="pump-client", daemon=True)
        self._proc.start()
        child.close()
        self._sock = parent
        self._sender = _Sender(parent)
        self._lock = threading.Lock()
        self._answers: dict[int, _Answer] = {}
        self._commits: set[_Answer] = set()
        self._next_id = 0
        self._closed: str | None = None
        self._wait_ready(start_timeout)
        self._reader = threading.Thread(target=self._read_loop, name="pump-client-answers", daemon=True)
        self._reader.start()

    def _wait_ready(self, timeout: float) -> None:
        """Read the child's first message: READY, or the error its PumpsClient raised."""
        self._sock.settimeout(timeout)
        try:
            length, kind, _ = _HEAD.unpack(self._recv_exactly(_HEAD.size))
            payload = self._recv_exactly(length)
        except (OSError, EOFError) as exc:
            self._abandon()
            raise E.PumpClientClosed(f"pump client process did not start: {exc!r}") from exc
        self._sock.settimeout(None)
        if kind != _READY:
            self._abandon()
            raise _error_from(payload)

    def _abandon(self) -> None:
        """A child that never became ready: stop it and close our end."""
        self._stop_child()
        self._sock.close()

    def _recv_exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise EOFError(f"pump client process exited (code {self._proc.exitcode})")
            buf += chunk
        return buf

    # ---- requests ----------------------------------------------------------------------------

    def _request(self, kind: int, binlog: binlog_pb2.Binlog) -> _Answer:
        answer = _Answer()
        with self._lock:
            if self._closed is not None:
                raise E.PumpClientClosed(self._closed)
            ident = self._next_id = self._next_id + 1
            self._answers[ident] = answer
            if kind == _COMMIT:
                self._commits.add(answer)
        try:
            self._sender.send(kind, ident, binlog.SerializeToString())
        except OSError as exc:
            self._fail_all(f"pump client process is gone: {exc}")
        return answer

    def start_prewrite(self, binlog: binlog_pb2.Binlog) -> _Answer:
        """Send a prewrite binlog; ``result()`` waits for the pump's answer (``write_binlog``'s errors)."""
        if binlog.tp != binlog_pb2.Prewrite:
            raise ValueError("start_prewrite takes prewrite binlogs")
        return self._request(_PREWRITE, binlog)

    def write_binlog(self, binlog: binlog_pb2.Binlog) -> str | None:
        """Write one binlog and wait: the node id of the pump that stored it (None: a commit given up)."""
        if binlog.tp == binlog_pb2.Prewrite:
            return self.start_prewrite(binlog).result()
        return self.write_commit_async(binlog).result()

    def write_commit_async(self, binlog: binlog_pb2.Binlog) -> _Answer:
        """Send a commit/rollback binlog without waiting; its answer is the node id, or None when given up."""
        if binlog.tp == binlog_pb2.Prewrite:
            raise ValueError("write_commit_async takes commit or rollback binlogs, not prewrites")
        return self._request(_COMMIT, binlog)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every commit sent so far has its answer; False if ``timeout`` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            pending = list(self._commits)
        for answer in pending:
            try:
                answer.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return False
            except Exception:  # noqa: BLE001 - the sender of that commit sees it
                pass
        return True

    def close(self) -> None:
        """Let the child finish its commits, close its client, and stop it; idempotent."""
        with self._lock:
            if self._closed is not None:
                return
            self._closed = "pump client is closed"
        try:
            self._sender.send(_CLOSE, 0)
        except OSError:
            pass
        self._proc.join(self.write_timeout + 10.0)
        self._stop_child()
        self._reader.join(5.0)
        self._sock.close()

    def _stop_child(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5.0)

    # ---- answers -----------------------------------------------------------------------------

    def _on_answer(self, kind: int, ident: int, payload: bytes) -> bool:
        with self._lock:
            answer = self._answers.pop(ident, None)
            if answer is not None:
                self._commits.discard(answer)
        if answer is not None:
            if kind == _STORED:
                answer._settle(payload.decode() or None, None)
            else:
                answer._settle(None, _error_from(payload))
        return True

    def _read_loop(self) -> None:
        try:
            _read_messages(self._sock, self._on_answer)
        except OSError:
            pass
        self._proc.join(1.0)
        self._fail_all(f"pump client process ended (exit code {self._proc.exitcode})")

    def _fail_all(self, why: str) -> None:
        with self._lock:
            if self._closed is None:
                self._closed = why
            answers, self._answers = self._answers, {}
            self._commits.clear()
        for answer in answers.values():
            answer._settle(None, E.PumpClientClosed(why))

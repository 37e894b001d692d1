"""``upstream.binlogs`` on its own (fake pump-client answers): a prewrite's outcome is asked for once
and kept, ``when_answered`` calls back whatever the outcome, and a closed sink refuses new writes
without raising for commit binlogs."""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from schemas import binlog_pb2
from upstream.binlogs import BinlogSink, PendingPrewrite
from upstream.errors import BinlogWriteFailed
from upstream.faults import Faults
from upstream.pump_client.errors import NoAvailablePump, PumpClientClosed


class _Slow:
    """An in-process client's pending prewrite: ``result()`` waits, then answers or raises."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.error = error

    def result(self) -> str:
        self.calls += 1
        self.release.wait(10)
        if self.error is not None:
            raise self.error
        return "pump-1"


def _binlog() -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=7, prewrite_key=b"k")


@pytest.mark.parametrize("error, expected", [(None, None), (NoAvailablePump("no pump"), BinlogWriteFailed),
                                             (OSError("connection reset"), OSError)])
def test_the_outcome_is_asked_once_and_the_callback_always_runs(error: BaseException | None,
                                                                 expected: type[BaseException] | None) -> None:
    sink = BinlogSink("file:///unused", 1, Faults())
    pending = _Slow(error)
    p = PendingPrewrite(sink, _binlog(), pending)
    called = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        p.when_answered(called.set, pool)
        assert not called.wait(0.2)              # waits for the answer in the pool, not here
        pending.release.set()
        assert called.wait(10)
    for _ in range(2):                           # the same outcome again, without asking again
        if expected is None:
            assert p.result() is True
        else:
            with pytest.raises(expected):
                p.result()
    assert pending.calls == 1


def test_ignore_error_turns_a_failed_prewrite_into_false_once(caplog: pytest.LogCaptureFixture) -> None:
    sink = BinlogSink("file:///unused", 1, Faults(), ignore_error=True)
    pending = _Slow(NoAvailablePump("no pump"))
    pending.release.set()
    p = PendingPrewrite(sink, _binlog(), pending)
    with caplog.at_level(logging.ERROR, logger="upstream.binlogs"):
        assert p.result() is False and p.result() is False
    assert sink.skipped and not sink.enabled
    assert caplog.text.count("binlog is skipped from now on") == 1


def test_a_closed_sink_refuses_prewrites_and_drops_commit_binlogs_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    sink = BinlogSink("file:///unused", 1, Faults())
    sink.close()
    with pytest.raises(PumpClientClosed, match="closed"):
        sink.client()
    with pytest.raises(BinlogWriteFailed, match="closed"):
        sink.prewrite(_binlog())
    commit = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=7, commit_ts=9, prewrite_key=b"k")
    with caplog.at_level(logging.WARNING, logger="upstream.binlogs"):
        assert sink.finish(commit) is None
    assert "Commit binlog of txn 7 not sent" in caplog.text

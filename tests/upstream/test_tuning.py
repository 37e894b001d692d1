"""Process settings of the emulator: CPU lists, pinning every thread of a real process, GC thresholds,
and the ``binlake-emulator serve`` flags that apply them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from upstream.tuning import TuningError, parse_cpus, pin_process

ROOT = Path(__file__).resolve().parents[2]
USABLE = sorted(os.sched_getaffinity(0))


def test_parse_cpus_lists_and_ranges() -> None:
    first = USABLE[0]
    assert parse_cpus(str(first)) == {first}
    assert parse_cpus(f" {first} , {first}") == {first}
    if USABLE == list(range(USABLE[0], USABLE[-1] + 1)):
        assert parse_cpus(f"{USABLE[0]}-{USABLE[-1]}") == set(USABLE)


@pytest.mark.parametrize("text, message", [
    ("x", "'x' is not a CPU number or range"),
    ("1-", "'1-' is not a CPU number or range"),
    ("3-1", "bad range '3-1'"),
    ("-2", "is not a CPU number or range"),
    (" , ", "names no CPU"),
    ("100000", "CPU(s) [100000] are not available"),
])
def test_parse_cpus_refuses_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(TuningError) as info:
        parse_cpus(text)
    assert message in str(info.value)


def test_pin_process_pins_every_thread_of_a_running_process() -> None:
    code = ("import threading, time\n"
            "for _ in range(3): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
            "print('up', flush=True); time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        assert len(tids) >= 4
        target = {USABLE[-1]}
        pin_process(target, proc.pid)
        assert {tid: os.sched_getaffinity(tid) for tid in tids} == {tid: target for tid in tids}
    finally:
        proc.kill()
        proc.wait()


def test_tune_gc_freezes_and_raises_the_threshold() -> None:
    code = ("import gc\nfrom upstream.tuning import tune_gc\n"
            "before = gc.get_threshold(); tune_gc(0); same = gc.get_threshold()\n"
            "tune_gc(1234); print(before == same, gc.get_threshold(), gc.get_freeze_count() > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["True", "(1234,", "20,", "20)", "True"]


def _upstream(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "upstream.cli", "serve", "--tso-addr", "127.0.0.1:0",
                           "--status-addr", "127.0.0.1:0", "--mysql-addr", "", "--registry", "", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_cli_refuses_cpus_it_cannot_use() -> None:
    r = _upstream("--cpu-affinity", "100000")
    assert r.returncode == 1
    assert "binlake-emulator serve: error: cpu-affinity '100000': CPU(s) [100000] are not available" in r.stderr


def test_cli_runs_a_workload_pinned() -> None:
    cpu = USABLE[-1]
    r = _upstream("--cpu-affinity", str(cpu), "--gc-threshold", "20000", "--workload", "mixed",
                  "--duration", "1", "--rate", "50", "--workers", "2")
    assert r.returncode == 0, r.stderr
    assert f"pinned to CPU(s) {cpu}" in r.stderr
    assert "workload done:" in r.stderr


def test_config_refuses_an_unknown_pump_client_mode(tmp_path: Path) -> None:
    from ingest.config import ConfigError, load_config
    from upstream.config import UpstreamConfig

    conf = tmp_path / "upstream.toml"
    conf.write_text('pump-client = "fork"\ncpu-affinity = "0"\n')
    with pytest.raises(ConfigError, match="pump-client: expected one of thread, process, got 'fork'"):
        load_config(UpstreamConfig, conf)
    assert load_config(UpstreamConfig, conf, {"pump-client": "process"}).pump_client == "process"

"""systemd notify and watchdog: the protocol on real sockets, and the daemon on the test cluster
telling a socket this test reads that it is READY, its STATUS, and WATCHDOG pings, which stop
while a cycle is stuck (a squeue that does not return) and resume when it moves again."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cluster_jobs import SLURM_RL, Jobs, daemon_argv, policies_decided, wait_for

from slurm_rl.daemon.notify import Notifier, socket_address, watchdog_period


@dataclass
class Listener:
    """A datagram socket standing in for systemd: every message, with its arrival time."""

    sock: socket.socket
    messages: list[tuple[float, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            self.messages.append((time.monotonic(), data.decode()))

    def lines(self, key: str) -> list[tuple[float, str]]:
        return [(t, line) for t, m in list(self.messages) for line in m.split("\n")
                if line.startswith(key)]

    def wait_for(self, key: str, count: int = 1, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while len(self.lines(key)) < count:
            assert time.monotonic() < end, f"no {count} x {key} in {timeout}s: {self.messages}"
            time.sleep(0.05)


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[Listener, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify.sock")
    sock.bind(path)
    lis = Listener(sock)
    thread = threading.Thread(target=lis.run, daemon=True)
    thread.start()
    yield lis, path
    lis._stop.set()
    thread.join()
    sock.close()


def test_addresses_and_the_watchdog_period() -> None:
    assert socket_address("@slurm-rl/x") == b"\0slurm-rl/x"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert socket_address("") is None and socket_address("vsock:2:1") is None
    assert watchdog_period({"WATCHDOG_USEC": "30000000"}, 7) == 30.0
    assert watchdog_period({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"}, 7) == 30.0
    assert watchdog_period({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "8"}, 7) is None
    assert watchdog_period({"WATCHDOG_USEC": "x"}, 7) is None
    assert watchdog_period({"WATCHDOG_USEC": "0"}, 7) is None


def test_messages_reach_an_abstract_socket_and_pings_are_paced() -> None:
    name = f"slurm-rl-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(2)
    now = [100.0]
    n = Notifier({"NOTIFY_SOCKET": f"@{name}", "WATCHDOG_USEC": "2000000"}, clock=lambda: now[0])
    try:
        assert n.ready("cycle 1:\nfine") and sock.recv(4096) == b"READY=1\nSTATUS=cycle 1: fine"
        assert n.watchdog() and sock.recv(4096) == b"WATCHDOG=1"
        now[0] += 0.5  # under half the period: no ping
        assert not n.watchdog()
        now[0] += 0.6
        assert n.watchdog() and sock.recv(4096) == b"WATCHDOG=1"
        assert n.watchdog(force=True) and sock.recv(4096) == b"WATCHDOG=1"
    finally:
        n.close()
        sock.close()


def test_without_notify_socket_nothing_is_sent() -> None:
    n = Notifier({})
    assert not n.enabled and not n.ready("x") and not n.watchdog(force=True)


def test_a_vanished_socket_costs_a_warning_not_the_daemon(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert not n.ready("x") and not n.status("y")
    assert sum("sd_notify" in r.message for r in caplog.records) == 1


FAKE_SQUEUE = """#!/bin/sh
# Stands in for squeue while {flag} exists (a hung slurmctld call), then runs the real one.
while [ -e {flag} ]; do sleep 0.05; done
exec {real} "$@"
"""


@pytest.mark.slurm
def test_ready_status_watchdog_and_a_stuck_loop_stops_the_pings(
        jobs: Jobs, tmp_path: Path, listener: tuple[Listener, str]) -> None:
    lis, sock_path = listener
    jobs.submit("n0", hold=True)
    flag = tmp_path / "stall"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    real = subprocess.run(["sh", "-c", "command -v squeue"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (bindir / "squeue").write_text(FAKE_SQUEUE.format(flag=flag, real=real))
    (bindir / "squeue").chmod(0o755)
    env = {**os.environ, "NOTIFY_SOCKET": sock_path, "WATCHDOG_USEC": "600000",
           "PATH": f"{bindir}:{os.environ['PATH']}"}
    log = (tmp_path / "daemon.log").open("w")
    proc = subprocess.Popen(daemon_argv(tmp_path / "n.db", jobs.prefix, "--interval", "1.5"),
                            env=env, stderr=log)
    try:
        lis.wait_for("READY=1")
        ready_at = lis.lines("READY=1")[0][0]
        status = [line for t, line in lis.lines("STATUS=") if t == ready_at]
        assert status and "jobs seen" in status[0] and "policy deadline" in status[0], status
        # Pings every 0.3 s (half of 0.6 s), also while the loop waits between cycles.
        lis.wait_for("WATCHDOG=1", count=len(lis.lines("WATCHDOG=1")) + 6, timeout=10)
        pings = [t for t, _ in lis.lines("WATCHDOG=1")]
        gaps = [b - a for a, b in zip(pings[-6:-1], pings[-5:], strict=True)]
        assert max(gaps) < 0.6, gaps

        flag.touch()  # the next cycle's squeue hangs
        time.sleep(1.5 + 0.6 + 0.5)  # the wait ends, the cycle starts, a last ping at most
        stuck_from = time.monotonic()
        time.sleep(2.0)
        late = [t for t, _ in lis.lines("WATCHDOG=1") if t >= stuck_from]
        assert late == [], f"{len(late)} pings while the cycle was stuck"
        assert proc.poll() is None

        flag.unlink()  # the cycle finishes: pings and STATUS resume
        seen = len(lis.lines("WATCHDOG=1"))
        lis.wait_for("WATCHDOG=1", count=seen + 2, timeout=10)
    finally:
        if flag.exists():
            flag.unlink()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        log.close()
    assert code == 0, (tmp_path / "daemon.log").read_text()
    lis.wait_for("STOPPING=1", timeout=5)
    assert len(lis.lines("READY=1")) == 1


@pytest.mark.slurm
def test_sighup_reloads_the_config_and_a_bad_one_changes_nothing(
        jobs: Jobs, tmp_path: Path, listener: tuple[Listener, str]) -> None:
    lis, sock_path = listener
    jobs.submit("h0", hold=True)
    db = tmp_path / "r.db"
    config = tmp_path / "slurm-rl.toml"
    config.write_text(f'[database]\npath = "{db}"\n[daemon]\npolicy = "fifo"\n')
    log_path = tmp_path / "daemon.log"
    log = log_path.open("w")
    proc = subprocess.Popen([SLURM_RL, "daemon", "--config", str(config), "--interval", "0.5",
                             "--only-name-prefix", jobs.prefix],
                            env={**os.environ, "NOTIFY_SOCKET": sock_path}, stderr=log)
    try:
        wait_for(lambda: "fifo" in policies_decided(db), 60, "a cycle decided by fifo")
        config.write_text(f'[database]\npath = "{db}"\n[daemon]\npolicy = "deadline"\n'
                          'dry_run = true\ninterval_s = 7.0\n')
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: policies_decided(db)[-1:] == ["deadline"], 60, "deadline after SIGHUP")
        lis.wait_for("RELOADING=1")
        lis.wait_for("READY=1", count=2)  # systemd's reload is over
        config.write_text("[daemon]\npolicy = 3\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "not reloaded" in log_path.read_text(), 30, "the refusal")
        n = len(policies_decided(db))
        wait_for(lambda: len(policies_decided(db)) > n + 1, 30, "two more cycles")
        assert set(policies_decided(db)[n:]) == {"deadline"}
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        log.close()
    text = log_path.read_text()
    assert code == 0, text
    assert "configuration reloaded" in text and "policy deadline, dry run" in text, text
    assert "[daemon] interval_s changed: takes effect when the daemon restarts" in text, text
    refused = [line for line in text.splitlines() if "not reloaded" in line]
    assert len(refused) == 1 and "daemon.policy: expected a string" in refused[0], refused
    con = sqlite3.connect(db)
    try:
        dry = [r[0] for r in con.execute("SELECT dry_run FROM decisions WHERE policy = ?",
                                         ("deadline",))]
    finally:
        con.close()
    assert dry and all(dry)

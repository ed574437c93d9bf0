"""systemd's notification protocol (sd_notify), spoken directly: no libsystemd, no extra package.

A service of `Type=notify` gets `NOTIFY_SOCKET` in its environment: a datagram Unix socket, a
path, or an abstract name written with a leading "@". Each message is one datagram of
newline-separated KEY=VALUE lines (READY=1, STATUS=..., WATCHDOG=1, STOPPING=1, RELOADING=1).
With `WatchdogSec=` systemd also sets `WATCHDOG_USEC` (and `WATCHDOG_PID`, the process meant):
unless WATCHDOG=1 arrives at least that often, systemd kills and (with Restart=) restarts the
service. The convention, followed here, is to ping at half that period.

Outside systemd (no NOTIFY_SOCKET) every method is a no-op costing one attribute test, so the
daemon calls them unconditionally. A send that fails (systemd gone, socket full) is logged once
and never stops the daemon: the watchdog then does what it is for.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

log = logging.getLogger("slurm_rl.daemon")

MAX_STATUS = 400
"""Bytes of STATUS= text sent (systemctl status shows one line)."""


class Notifier:
    """Sends sd_notify messages to the socket named by the environment, if any."""

    def __init__(self, environ: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        env = os.environ if environ is None else environ
        self.address = socket_address(env.get("NOTIFY_SOCKET", ""))
        self.watchdog_s = watchdog_period(env, os.getpid())
        """WATCHDOG_USEC in seconds when the watchdog is on for this process, else None."""
        self._clock = clock
        self._last_ping: float | None = None
        self._failed = False
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def ping_every_s(self) -> float | None:
        """How often the loop must ping: half the watchdog period (None: no watchdog)."""
        return None if self.watchdog_s is None else self.watchdog_s / 2

    def send(self, *lines: str) -> bool:
        """Send one datagram of `lines`; True if it went out (False also when not enabled)."""
        if self.address is None:
            return False
        payload = "\n".join(lines).encode("utf-8", "replace")
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
            self._sock.sendto(payload, self.address)
        except OSError as exc:
            if not self._failed:
                log.warning("sd_notify to %s failed: %s", self.address, exc)
            self._failed = True
            return False
        self._failed = False
        return True

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={_clean(status)}")

    def status(self, status: str) -> bool:
        return self.send(f"STATUS={_clean(status)}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1", "STATUS=stopping")

    def reloading(self) -> bool:
        return self.send("RELOADING=1", "STATUS=reloading the configuration and the policy")

    def watchdog(self, *, force: bool = False) -> bool:
        """Ping the watchdog if half its period has passed since the last ping (or `force`).

        Call it only where the loop demonstrably moves on (a cycle ended, a wait slice ended):
        a loop stuck in a cycle then stops pinging, which is the point."""
        every = self.ping_every_s
        if every is None:
            return False
        now = self._clock()
        if not force and self._last_ping is not None and now - self._last_ping < every:
            return False
        self._last_ping = now
        return self.send("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def socket_address(value: str) -> str | bytes | None:
    """NOTIFY_SOCKET → the address for sendto: a path, or an abstract name as bytes ("@x" →
    b"\\0x"). None when unset or not a Unix socket name (systemd also allows vsock: not here)."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    log.warning("NOTIFY_SOCKET=%r is neither a path nor an abstract name: not notifying", value)
    return None


def watchdog_period(env: Mapping[str, str], pid: int) -> float | None:
    """WATCHDOG_USEC in seconds, if set, positive, and meant for `pid` (WATCHDOG_PID)."""
    raw = env.get("WATCHDOG_USEC", "")
    if not raw:
        return None
    meant = env.get("WATCHDOG_PID", "")
    if meant and meant.strip() != str(pid):
        return None  # set for another process (e.g. a parent shell)
    try:
        usec = int(raw)
    except ValueError:
        log.warning("WATCHDOG_USEC=%r is not a whole number: watchdog pings off", raw)
        return None
    if usec <= 0:
        return None
    return usec / 1e6


def _clean(text: str) -> str:
    """STATUS= is one line: newlines would start new KEY=VALUE assignments."""
    one = " ".join(text.split())
    return one[:MAX_STATUS]

"""The one command runner: every Slurm command is an argument list run through here."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

# stderr fragments that mean "slurmctld is not there" (as opposed to "your request is wrong").
_UNAVAILABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Socket timed out on send/recv operation",
    "Connection refused",
    "Slurm backup controller in standby mode",
    "Zero Bytes were transmitted or received",
)


@dataclass(frozen=True, kw_only=True)
class CommandResult:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def controller_unavailable(self) -> bool:
        return self.returncode != 0 and any(m in self.stderr for m in _UNAVAILABLE_MARKERS)


class SlurmCommandError(RuntimeError):
    """A Slurm command exited non-zero."""

    def __init__(self, result: CommandResult) -> None:
        self.result = result
        msg = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
        super().__init__(f"{' '.join(result.args)} exited {result.returncode}: {msg}")


class SlurmUnavailableError(SlurmCommandError):
    """slurmctld could not be reached (down, restarting, or network)."""


class Runner(Protocol):
    """Runs one command. Implementations: `SubprocessRunner`; recorded fakes in unit tests."""

    def run(self, args: Sequence[str], *, timeout_s: float | None = None) -> CommandResult: ...


class EnvRunner(Protocol):
    """A runner that can also change the command's environment for one call: the pollers pass
    their output format through the environment (SQUEUE_FORMAT2), where other users cannot read
    it, unlike the argument list in /proc/<pid>/cmdline."""

    def run(self, args: Sequence[str], *, timeout_s: float | None = None,
            env: Mapping[str, str | None] | None = None) -> CommandResult: ...


class InputRunner(Protocol):
    """A runner that can also feed the command's standard input: scontrol reads many commands
    from stdin in one process, which costs far less than one process per command."""

    def run(self, args: Sequence[str], *, timeout_s: float | None = None,
            input: str | None = None) -> CommandResult: ...


class SubprocessRunner:
    """Runs commands with subprocess, no shell, with an optional environment overlay.

    Output is read as bytes and decoded as UTF-8 with errors="replace": a job name or comment
    holding bytes that are not UTF-8 is data to show, never a reason for the call to fail.
    """

    def __init__(self, env: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> None:
        self._env = {**os.environ, **env} if env else None
        self._timeout_s = timeout_s

    def run(self, args: Sequence[str], *, timeout_s: float | None = None,
            input: str | None = None, env: Mapping[str, str | None] | None = None
            ) -> CommandResult:
        """`env` overlays this call's environment; a value of None removes the variable."""
        argv = tuple(args)
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                argv, input=None if input is None else input.encode(), capture_output=True,
                env=self._call_env(env), timeout=timeout_s or self._timeout_s, check=False,
            )
        except subprocess.TimeoutExpired as exc:
            return CommandResult(
                args=argv, returncode=124, stdout=_text(exc.stdout),
                stderr=_text(exc.stderr) + "\nSocket timed out on send/recv operation (timeout)",
                duration_s=time.perf_counter() - start,
            )
        except FileNotFoundError:
            return CommandResult(
                args=argv, returncode=127, stdout="",
                stderr=f"{argv[0]}: command not found (are Slurm's client tools installed?)",
                duration_s=time.perf_counter() - start,
            )
        return CommandResult(
            args=argv, returncode=proc.returncode, stdout=_text(proc.stdout),
            stderr=_text(proc.stderr), duration_s=time.perf_counter() - start,
        )

    def _call_env(self, overlay: Mapping[str, str | None] | None) -> dict[str, str] | None:
        if not overlay:
            return self._env
        env = dict(os.environ if self._env is None else self._env)
        for key, value in overlay.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env


def check(result: CommandResult) -> CommandResult:
    """Raise the matching error for a failed command; return it unchanged otherwise."""
    if result.ok:
        return result
    if result.controller_unavailable:
        raise SlurmUnavailableError(result)
    raise SlurmCommandError(result)


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value

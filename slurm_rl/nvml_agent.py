"""`slurm-rl agent`: sample this node's GPUs through NVML and publish them in the node's Extra.

Runs on every GPU node (a systemd unit, as root or as SlurmUser: updating a node needs
operator rights). Each sample is every local GPU's utilisation, memory used/total, power and
temperature, encoded by `gpu_extra.encode_samples` and written with
`scontrol update NodeName=<node> Extra=<json>`; the daemon reads it back with its sinfo poll.
A host without the NVML library or without GPUs gets one clear line and nothing is written.
"""

from __future__ import annotations

import importlib
import logging
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import click

from slurm_rl.config import seconds_option
from slurm_rl.core import GpuSample
from slurm_rl.gpu_extra import encode_samples
from slurm_rl.slurm.runner import CommandResult, Runner, SubprocessRunner, check

log = logging.getLogger("slurm_rl.nvml_agent")

_MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """No NVML library, no driver, or no GPU: nothing to sample."""


class GpuSource(Protocol):
    """Where samples come from: `NvmlSource` (pynvml) on a node; fakes in tests."""

    def sample(self) -> tuple[GpuSample, ...]: ...


class NvmlSource:
    """Every local GPU through pynvml (the nvidia-ml-py package). `nvml` is the pynvml module,
    or a stand-in with the same functions."""

    def __init__(self, module: ModuleType | Any | None = None) -> None:
        nvml: Any = module
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                raise NvmlUnavailable(f"pynvml is not installed ({exc})") from None
        self.nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(str(exc) or type(exc).__name__) from None
        try:
            self.count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML found no GPU ({exc})") from None
        if self.count == 0:
            raise NvmlUnavailable("NVML found no GPU")

    def sample(self) -> tuple[GpuSample, ...]:
        nvml = self.nvml
        out = []
        for i in range(self.count):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = self._get(nvml.nvmlDeviceGetMemoryInfo, h)
            util = self._get(nvml.nvmlDeviceGetUtilizationRates, h)
            power_mw = self._get(nvml.nvmlDeviceGetPowerUsage, h)
            temp = self._get(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
            out.append(GpuSample(
                index=i,
                util_pct=float(util.gpu) if util is not None else None,
                mem_used_mib=round(mem.used / _MIB) if mem is not None else None,
                mem_total_mib=round(mem.total / _MIB) if mem is not None else None,
                power_w=round(power_mw / 1000.0, 1) if power_mw is not None else None,
                temp_c=float(temp) if temp is not None else None,
            ))
        return tuple(out)

    def _get(self, fn: Any, *args: Any) -> Any:
        """One reading; None where this GPU does not support it (NVML says so per call)."""
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def extra_argv(node: str, samples: Sequence[GpuSample], at: float) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", f"Extra={encode_samples(samples, at)}"]


def publish(runner: Runner, node: str, samples: Sequence[GpuSample], at: float) -> CommandResult:
    """Write the samples into the node's Extra; raises SlurmCommandError on failure."""
    return check(runner.run(extra_argv(node, samples, at)))


def short_hostname() -> str:
    return socket.gethostname().split(".", 1)[0]


def run_agent(*, node: str, interval_s: float, once: bool, stop: threading.Event,
              runner: Runner, open_source: Any = NvmlSource, echo: bool = False) -> int:
    """The agent's loop; returns the exit status. `open_source()` gives a GpuSource or raises
    NvmlUnavailable."""
    source = None
    said_unavailable = False
    said_slurm = False
    while not stop.is_set():
        if source is None:
            try:
                source = open_source()
            except NvmlUnavailable as exc:
                if once or not said_unavailable:
                    click.echo(f"slurm-rl agent: no GPU to sample on {node} ({exc}); "
                               "writing nothing" + ("" if once else f", retrying every "
                                                    f"{interval_s:g}s"), err=True)
                said_unavailable = True
                if once:
                    return 0
        if source is not None:
            at = time.time()
            samples = source.sample()
            if echo:
                click.echo(encode_samples(samples, at))
            else:
                try:
                    publish(runner, node, samples, at)
                    if said_slurm:
                        log.info("Slurm is reachable again")
                    said_slurm = False
                    log.debug("wrote %d GPU samples to %s's Extra", len(samples), node)
                except Exception as exc:  # Slurm down or refusing: say so once, keep sampling
                    if once:
                        click.echo(f"slurm-rl agent: could not write {node}'s Extra: {exc}",
                                   err=True)
                        return 1
                    if not said_slurm:
                        log.warning("could not write %s's Extra (%s); retrying", node, exc)
                    said_slurm = True
            if once:
                return 0
        stop.wait(interval_s)
    return 0


@click.command("agent")
@click.option("--once", is_flag=True, help="Sample and write once, then exit.")
@click.option("--interval", "interval_s", type=float, callback=seconds_option,
              help="Seconds between samples, 0.1 to 86400 (default: [agent] interval_s).")
@click.option("--node", default=None, help="Slurm node name (default: the short hostname).")
@click.option("--print", "echo", is_flag=True,
              help="Print the Extra JSON instead of writing it to Slurm.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-v", "--verbose", is_flag=True)
def agent(once: bool, interval_s: float | None, node: str | None, echo: bool,
          config_file: Path | None, verbose: bool) -> None:
    """Publish this node's GPU utilisation, memory, power and temperature (NVML) to Slurm."""
    import signal
    import sys

    from slurm_rl.cli_common import setup_logging
    from slurm_rl.config import ConfigError, load_config

    setup_logging(verbose)
    try:
        config = load_config(config_file)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    from slurm_rl.slurm.conf import slurm_conf_problem

    if not echo and (problem := slurm_conf_problem()) is not None:
        raise click.ClickException(problem)  # scontrol would retry for a minute
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    code = run_agent(node=node or short_hostname(),
                     interval_s=interval_s or config.agent.interval_s, once=once, stop=stop,
                     runner=SubprocessRunner(), echo=echo)
    sys.exit(code)

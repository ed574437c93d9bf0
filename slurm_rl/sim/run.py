"""One simulation from names and numbers: load the trace, size the cluster, build the policy,
run. Shared by `slurm-rl simulate`, `slurm-rl evaluate` and the benchmark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from slurm_rl import policies
from slurm_rl.core import Policy
from slurm_rl.sim import trace as tr
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import SimResult, Simulator

DATA_PREFIX = "data:"
"""`data:NAME` names a trace shipped in slurm_rl/data/traces: data:itp-deadline-cluster10.csv."""


def resolve_trace_path(text: str, base: Path | None = None) -> Path:
    """A path as given (relative to `base` if set), or a shipped trace for 'data:NAME'."""
    if text.startswith(DATA_PREFIX):
        name = text[len(DATA_PREFIX):]
        path = Path(str(resources.files("slurm_rl") / "data" / "traces" / name))
        if not path.is_file():
            shipped = sorted(p.name for p in path.parent.iterdir()
                             if p.suffix in (".csv", ".swf"))
            raise FileNotFoundError(f"no shipped trace {name!r} (have: {', '.join(shipped)})")
        return path
    path = Path(text)
    return path if path.is_absolute() or base is None else base / path


@dataclass(frozen=True, kw_only=True)
class Sizing:
    """Either explicit nodes or a target load; gpus_per_node in both cases."""

    gpus_per_node: int = 4
    nodes: int | None = None
    load: float | None = None

    def __post_init__(self) -> None:
        if (self.nodes is None) == (self.load is None):
            raise ValueError("give either nodes or load (not both)")

    def nodes_for(self, jobs: Sequence[tr.TraceJob]) -> int:
        if self.nodes is not None:
            return self.nodes
        assert self.load is not None
        return tr.nodes_for_load(jobs, self.load, self.gpus_per_node)


def load_jobs(path: str | Path, fmt: str, window: str | None = None) -> tuple[tr.TraceJob, ...]:
    jobs = tr.load(path, fmt).jobs
    if window:
        start, count = tr.parse_window(window)
        jobs = tr.window(jobs, start, count)
    return jobs


def simulate(jobs: Sequence[tr.TraceJob], policy: str | Policy, sizing: Sizing, *,
             engine: EngineConfig | None = None, seed: int = 0,
             policy_options: dict[str, Any] | None = None) -> SimResult:
    """Run `policy` (a registered name, built with `policy_options`, or a Policy object, which
    the run resets if it is `Stateful`) over `jobs` on a cluster sized by `sizing`. `engine`
    supplies every other setting (its nodes, gpus_per_node and seed are replaced)."""
    nodes = sizing.nodes_for(jobs)
    base = engine or EngineConfig(nodes=nodes, gpus_per_node=sizing.gpus_per_node)
    cfg = replace(base, nodes=nodes, gpus_per_node=sizing.gpus_per_node, seed=seed)
    if isinstance(policy, str):
        policy = policies.make(policy, **(policy_options or {}))
    elif policy_options:
        raise ValueError("policy_options are for a policy given by name, not an object")
    return Simulator(jobs, policy, cfg).run()


def offered_load(jobs: Sequence[tr.TraceJob], nodes: int, gpus_per_node: int) -> float:
    """Mean demand over capacity (the x axis of deadline-vs-load plots)."""
    return tr.mean_demand(jobs) / (nodes * gpus_per_node)

"""One model placed on an idle cluster: the plan `slurm-rl inference place` (and, inside a
Slurm job, `slurm-rl plan`) prints.

A learned scheduler's plan is guarded: the request plan (`schedulers.RequestPlan`: the better of
HEFT's placement and the queue-aware DP plan) is worked out as well, and where the cost model
predicts it finishes the request sooner, it is printed instead, with a line that says so. One
request on an idle cluster with no noise is exactly what the simulator predicts, so the printed
plan is never predicted slower than the heuristic's; the agent's own plan stands where it is at
least as fast. `guard=False` (`--no-guard`) prints the agent's plan as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from slurm_rl import checkpoint_errors
from slurm_rl.inference import planner
from slurm_rl.inference.cluster import Cluster
from slurm_rl.inference.profile import Profile
from slurm_rl.inference.schedulers import HEURISTICS, RequestPlan, Scheduler
from slurm_rl.inference.sim import InferenceSim, StreamConfig


@dataclass(frozen=True, kw_only=True)
class Plan:
    model: str
    scheduler: str
    devices: tuple[str, ...]
    """The device name of every layer, in profile order."""
    layer_names: tuple[str, ...]
    finish_s: tuple[float, ...]
    """Estimated finish of each layer after the request arrives (no contention)."""
    compute_s: tuple[float, ...] = ()
    """Estimated compute time of each layer on its device (the cluster's cost model)."""
    guard: str = ""
    """Why a learned scheduler's own plan was replaced (module doc); empty where it was not."""

    @property
    def latency_s(self) -> float:
        return max(self.finish_s)

    @property
    def stages(self) -> tuple[tuple[str, int, int], ...]:
        """Runs of consecutive layers on one device: (device, first, last) layer indices."""
        out: list[tuple[str, int, int]] = []
        for i, d in enumerate(self.devices):
            if out and out[-1][0] == d:
                out[-1] = (d, out[-1][1], i)
            else:
                out.append((d, i, i))
        return tuple(out)


def scheduler_for(name: str, checkpoint: Path | None) -> Scheduler:
    if name in HEURISTICS:
        return HEURISTICS[name]()
    from slurm_rl.inference import dqn
    from slurm_rl.inference.experiments import DEFAULT_CHECKPOINT

    path = checkpoint or DEFAULT_CHECKPOINT
    try:
        net = dqn.load(path)[0]
    except checkpoint_errors.CheckpointError as exc:  # (one line: the path and why)
        raise CheckpointError(str(exc)) from None
    return dqn.QScheduler(net)


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded (one line)."""


class NoRoomError(ValueError):
    """A layer fits on no device."""


def place(profile: Profile, cluster: Cluster, scheduler: str | Scheduler,
          checkpoint: Path | None = None, *, guard: bool = True) -> Plan:
    """The plan of `scheduler` (a name or a scheduler) for `profile` alone on `cluster`; a
    learned scheduler's guarded by the request plan unless `guard` is False (module doc)."""
    s = scheduler_for(scheduler, checkpoint) if isinstance(scheduler, str) else scheduler
    own = _place(profile, cluster, s)
    if not guard or type(s) in HEURISTICS.values():
        return own
    sim = _idle(profile, cluster)
    est = planner.request_rollout(sim)
    if est is None:
        return own
    # one request on an idle cluster without noise runs as estimated: the rollout is the
    # request plan's own plan (tests/inference/test_inference_place_guard.py checks it)
    ref = _plan(sim, RequestPlan.name, est.devices, est.finishes, sim.task.arrival)
    if ref.latency_s >= own.latency_s:
        return own
    return replace(ref, scheduler=f"{own.scheduler} (guarded)",
                   guard=f"{own.scheduler}'s own plan ({own.latency_s * 1e3:.3f} ms, "
                         f"{own.latency_s / ref.latency_s:.2f}x) is predicted slower than "
                         f"{ref.scheduler}'s, which is printed instead (--no-guard: the agent's)")


def _idle(profile: Profile, cluster: Cluster) -> InferenceSim:
    return InferenceSim(cluster, [profile], StreamConfig(tasks=1, noise=0.0))


def _place(profile: Profile, cluster: Cluster, s: Scheduler) -> Plan:
    sim = _idle(profile, cluster)
    while not sim.done:
        ok = sim.options().feasible
        if not ok.any():
            raise NoRoomError(f"{profile.model}: layer {sim.layer} "
                              f"({profile.layers[sim.layer].name}) fits on no device's memory")
        sim.place(s.choose(sim))
    r = sim.records[0]
    return _plan(sim, s.name, r.devices, r.finishes, r.arrival)


def _plan(sim: InferenceSim, scheduler: str, devices: Sequence[int], finishes: Sequence[float],
          arrival: float) -> Plan:
    """The Plan of the one model of `sim` placed on `devices`, its layers finishing at
    `finishes` (the simulator's clock)."""
    profile, cluster = sim.models[0].profile, sim.cluster
    return Plan(model=profile.model, scheduler=scheduler,
                devices=tuple(cluster.devices[d].name for d in devices),
                layer_names=tuple(lay.name for lay in profile.layers),
                finish_s=tuple(f - arrival for f in finishes),
                compute_s=tuple(float(sim.models[0].comp[i, d]) for i, d in enumerate(devices)))


def stage_times(p: Plan) -> list[tuple[float, float]]:
    """Each stage's predicted (start, done) seconds after the request arrives: a stage's
    layers run back to back (one request, no contention), so done - start is its compute and
    the gap from one stage's done to the next one's start is the transfer between them."""
    return [(p.finish_s[a] - p.compute_s[a], p.finish_s[b]) for _, a, b in p.stages]


def format_plan(p: Plan) -> str:
    lines = [f"# {p.model} by {p.scheduler}: predicted latency {p.latency_s * 1e3:.3f} ms, "
             f"{len(p.stages)} stage(s)"]
    if p.guard:
        lines.append(f"# guard: {p.guard}")
    for dev, a, b in p.stages:
        lines.append(f"stage {dev} layers {a}-{b} ({p.layer_names[a]} .. {p.layer_names[b]}) "
                     f"done at {p.finish_s[b] * 1e3:.3f} ms")
    return "\n".join(lines)

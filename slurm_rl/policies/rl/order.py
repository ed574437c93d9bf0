"""The learned order of pending jobs: `LearnedOrder`, the base of the order-only `RL` and of
the preemptive `RLPreempting` (preempting.py). The checkpoint's network (checkpoint.py: read
without the trainer, evaluated in numpy by scorer.py) scores each shown job from features.py's
observation; action.py turns the scores into the Decision, the same code the training
environment runs, so the simulator and the daemon decide as training did.

`preempt_by_work` here is the imitation teacher's preemption (stated remaining GPU-seconds;
benchmarks/rl_teachers.py).

A checkpoint that does not load, or a network that returns a non-finite score, raises
`RLPolicyError` with one line saying why: the daemon catches it and decides with its fallback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt

from slurm_rl.checkpoint_errors import CheckpointError, one_line
from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView, Preempt, id_key
from slurm_rl.policies.capacity import Capacity
from slurm_rl.policies.estimates import estimate_remaining
from slurm_rl.policies.preemption import may_preempt, plan_preemptions
from slurm_rl.policies.rl.action import decision_from_scores
from slurm_rl.policies.rl.checkpoint import load as load_checkpoint
from slurm_rl.policies.rl.features import (
    FeatureConfig,
    RowCache,
    pending_in_order,
    shown_rows,
)
from slurm_rl.policies.rl.scorer import NumpyScorer

NAME = "rl"


class RLPolicyError(RuntimeError):
    """The learned policy can not decide (its checkpoint does not load, or its network
    returned NaN or infinity); the message is one line."""


def default_checkpoint() -> Path:
    """The checkpoint shipped in the package (docs/rl.md: how it was trained)."""
    return Path(str(resources.files("slurm_rl") / "data" / "rl" / "default.pt"))


def remaining_work(job: JobView, now: float) -> float | None:
    """The remaining GPU-seconds a job states: `estimate_remaining` (a prediction, its own
    progress, its steps at the profiled throughput, else its remaining Slurm time limit) x its
    GPUs; None when it states nothing."""
    est = estimate_remaining(job, now)
    return None if est is None else est.seconds * max(job.gpus, 1)


def preempt_by_work(snapshot: ClusterSnapshot, ranked: Sequence[JobView], margin: float,
                    label: str) -> tuple[Preempt, ...]:
    """The requeues that let pending jobs (`ranked`, best first) start: running jobs whose
    remaining_work exceeds (1 + margin) x the pending job's, largest first (plan_preemptions).
    Jobs that state no remaining work neither preempt nor are preempted."""
    now, k = snapshot.time, 1.0 + margin
    work: dict[JobId, float] = {}
    movers = []
    for p in ranked:
        if p.held:
            continue
        w = remaining_work(p, now)
        if w is not None:
            work[p.id] = w
            movers.append(p)

    def victims() -> list[JobView]:  # (asked only if some pending job does not fit)
        out = []
        for v in snapshot.running:
            if may_preempt(v):
                w = remaining_work(v, now)
                if w is not None:
                    work[v.id] = w
                    out.append(v)
        out.sort(key=lambda v: (work[v.id], v.submit_time, id_key(v.id)), reverse=True)
        return out

    preempts, _ = plan_preemptions(
        Capacity.of(snapshot), movers, victims,
        outranks=lambda p, v: work[v.id] > k * work[p.id],
        reason=lambda v, p: (f"{label}: stated remaining {work[v.id] / 3600:.3g} GPU-h > "
                             f"{k:g} x {work[p.id] / 3600:.3g} GPU-h of job {p.id} "
                             f"({p.gpus} GPUs)"))
    return preempts


@dataclass(frozen=True, kw_only=True)
class LearnedOrder:
    """The learned order of pending jobs (the checkpoint's network, lazily loaded): the base of
    the order-only `RL` and of the preemptive `preempting.RLPreempting`."""

    name: str = field(default=NAME, init=False)
    checkpoint: str | None = None
    """Path of a checkpoint (`slurm-rl train --out`); None: the shipped one."""
    _net: NumpyScorer = field(init=False, repr=False, compare=False)
    _fcfg: FeatureConfig = field(init=False, repr=False, compare=False)
    _rows: RowCache = field(init=False, repr=False, compare=False)
    """This policy's cache of job rows (features.py): only a cache, it changes no decision."""

    def __post_init__(self) -> None:
        path = Path(self.checkpoint) if self.checkpoint else default_checkpoint()
        try:
            loaded = load_checkpoint(path)
        except CheckpointError as exc:  # (its message names the path: keep the reason only)
            raise RLPolicyError(f"rl: checkpoint {path} does not load: {exc.reason}") from exc
        except Exception as exc:  # noqa: BLE001 (any load failure is the same to the daemon)
            why = one_line(str(exc)) or type(exc).__name__
            raise RLPolicyError(f"rl: checkpoint {path} does not load: {why}") from exc
        object.__setattr__(self, "_net", loaded.scorer)
        object.__setattr__(self, "_fcfg", FeatureConfig(max_jobs=loaded.max_jobs))
        object.__setattr__(self, "_rows", RowCache())

    def scores(self, rows: npt.NDArray[np.float32], cluster: npt.NDArray[np.float32],
               now: float) -> npt.NDArray[np.float64]:
        """The network's scores of `rows` (scorer.py); RLPolicyError if any is not finite."""
        s = self._net.scores(rows, cluster)
        if not np.isfinite(s).all():
            bad = int((~np.isfinite(s)).sum())
            raise RLPolicyError(f"rl: the network returned a non-finite score at "
                                f"t={now:.0f} ({bad} of {len(s)} jobs)")
        return s

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        pending = pending_in_order(snapshot)
        rows, cluster, shown_ids = shown_rows(snapshot, self._fcfg, pending, cache=self._rows)
        if not shown_ids:
            return decision_from_scores(snapshot, shown_ids, [], policy=self.name,
                                        pending=pending)
        s = self.scores(rows, cluster, snapshot.time)
        return decision_from_scores(snapshot, shown_ids, s, policy=self.name, pending=pending)


@dataclass(frozen=True, kw_only=True)
class RL(LearnedOrder):
    """Order-only (declares no capability)."""

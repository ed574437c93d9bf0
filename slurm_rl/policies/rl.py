"""`rl`: the learned policy (docs/rl.md). Orders pending jobs by the mean score a trained
`rl.model.JobScorer` gives each, from `rl/features.py`'s observation, through the same
`decision_from_scores` the training environment uses, so the simulator and the daemon decide as
training did.

Deterministic (the Gaussian's mean, under `torch.no_grad`), stateless. GPU counts unchanged.
With `preempt_margin` set (the shipped default is None: order-only), it is also PREEMPTIVE
(`Preempting`): a pending job that does not fit in the free GPUs, taken in the network's order,
requeues running jobs whose stated remaining GPU-seconds (`remaining_work`: the remaining run
time `estimates.estimate_remaining` gives, x GPUs; never a true duration) exceed (1 +
preempt_margin) times its own, largest first, until it fits (`plan_preemptions`); a job that
cannot fit even then stops nobody. The live daemon records preemptions but does not apply them
(docs/daemon.md): on a live cluster only the order takes effect. torch is imported when the
policy is built, never when policy names are listed, so `rlsbatch` never loads it.

A checkpoint that does not load, or a network that returns a non-finite score, raises
`RLPolicyError` with one line saying why: the daemon catches it and decides with its fallback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobState, JobView, Preempt, id_key
from slurm_rl.policies.capacity import Capacity, job_parts
from slurm_rl.policies.estimates import estimate_remaining
from slurm_rl.policies.options import build
from slurm_rl.policies.preemption import plan_preemptions
from slurm_rl.rl.features import FeatureConfig, decision_from_scores, features, running_rows

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


def may_preempt(job: JobView) -> bool:
    """Managed, plainly RUNNING jobs (not completing, resizing or suspended)."""
    return job.managed and job.state is JobState.RUNNING


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
class _OrderOnly:
    name: str = field(default=NAME, init=False)
    checkpoint: str | None = None
    """Path of a checkpoint (`slurm-rl train --out`); None: the shipped one."""
    _model: Any = field(init=False, repr=False, compare=False)
    _fcfg: FeatureConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        path = Path(self.checkpoint) if self.checkpoint else default_checkpoint()
        try:
            import torch

            from slurm_rl.rl import model as rl_model

            torch.set_num_threads(1)  # a 64-slot MLP: threads only add overhead
            net, _ = rl_model.load(path)
        except Exception as exc:  # noqa: BLE001 (any load failure is the same to the daemon)
            why = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise RLPolicyError(f"rl: checkpoint {path} does not load: {why}") from exc
        object.__setattr__(self, "_model", net)
        object.__setattr__(self, "_fcfg", FeatureConfig(max_jobs=net.cfg.max_jobs))

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        import torch

        f = features(snapshot, self._fcfg)
        n = len(f.shown_ids)
        if n == 0:
            return decision_from_scores(snapshot, f.shown_ids, [], policy=self.name)
        with torch.no_grad():
            s = self._model.scores(torch.from_numpy(f.job_feats[:n]),
                                   torch.from_numpy(f.cluster_feats)).numpy()
        if not np.isfinite(s).all():
            bad = int((~np.isfinite(s)).sum())
            raise RLPolicyError(f"rl: the network returned a non-finite score at "
                                f"t={snapshot.time:.0f} ({bad} of {n} jobs)")
        return decision_from_scores(snapshot, f.shown_ids, s, policy=self.name)


@dataclass(frozen=True, kw_only=True)
class RL(_OrderOnly):
    """Order-only (declares no capability)."""


@dataclass(frozen=True, kw_only=True)
class RLPreempting(_OrderOnly):
    """The learned order plus preemption by the same network's scores (Preempting)."""

    preempt_margin: float = 0.0
    """Requeue a running job only if a pending job's score exceeds its own by more than this."""

    def __post_init__(self) -> None:
        if not self.preempt_margin >= 0:
            raise ValueError(f"preempt_margin must be >= 0, got {self.preempt_margin}")
        super().__post_init__()

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): managed, plainly RUNNING jobs."""
        return may_preempt(job)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        import torch

        if not _worth_deciding(snapshot):
            return Decision(policy=self.name)
        f = features(snapshot, self._fcfg)
        n = len(f.shown_ids)
        if n == 0:
            return decision_from_scores(snapshot, f.shown_ids, [], policy=self.name)
        net, cluster = self._model, torch.from_numpy(f.cluster_feats)
        stoppable = [v for v in snapshot.running if may_preempt(v)]
        rows = f.job_feats[:n]
        if stoppable:
            rows = np.concatenate([rows, running_rows(snapshot, stoppable)])
        with torch.no_grad():
            s = net.scores(torch.from_numpy(rows), cluster).numpy().astype(np.float64)
        if not np.isfinite(s).all():
            bad = int((~np.isfinite(s)).sum())
            raise RLPolicyError(f"rl: the network returned a non-finite score at "
                                f"t={snapshot.time:.0f} ({bad} of {len(s)} jobs)")
        d = decision_from_scores(snapshot, f.shown_ids, s[:n], policy=self.name)
        if not stoppable:
            return d
        score = dict(zip(f.shown_ids, s[:n].tolist(), strict=True))
        score.update(zip((v.id for v in stoppable), s[n:].tolist(), strict=True))
        by_id = {j.id: j for j in snapshot.pending}
        movers = [by_id[o.job_id] for o in d.order[:n] if not by_id[o.job_id].held]
        victims = sorted(stoppable, key=lambda v: (score[v.id], -v.submit_time))
        m = self.preempt_margin
        pre, _ = plan_preemptions(
            Capacity.of(snapshot), movers, victims,
            outranks=lambda p, v: score[p.id] > score[v.id] + m,
            reason=lambda v, p: (f"rl: score {score[v.id]:.3g} < {score[p.id]:.3g} - {m:g} "
                                 f"of job {p.id} ({p.gpus} GPUs)"))
        return Decision(policy=d.policy, order=d.order, preemptions=pre) if pre else d


def _worth_deciding(snapshot: ClusterSnapshot) -> bool:
    """Whether the preempting `rl` runs its network: some managed pending job fits the free
    GPUs now (the order matters), or one arrived at this instant (it may preempt). Otherwise
    nothing can start and the answer is an empty Decision (every job keeps what it has): a
    pending job considers preemption when it arrives, and again whenever GPUs free up and
    something fits. Keeps the per-event cost of a Preempting policy near an order-only one's."""
    now = snapshot.time
    free: Capacity | None = None
    looked = False
    tried: set[tuple[int, int]] = set()
    for j in snapshot.pending:
        if not j.managed or j.held:
            continue
        if j.submit_time == now:
            return True
        if not looked:
            looked = True
            cap = Capacity.of(snapshot)
            free = cap if cap.fits((1,)) else None
        if free is None:
            continue  # (no free GPU: only an arrival matters)
        key = (j.gpus, j.nodes)
        if key not in tried:
            if free.fits(job_parts(j, None, free.node_cap)):
                return True
            tried.add(key)
    return False


def new(**options: Any) -> RL | RLPreempting:
    """Options: checkpoint (the shipped one); preempt_margin (none: order-only; a number >=
    0: preemptive, see the module docstring)."""
    margin = options.pop("preempt_margin", None)
    if margin is None or margin == "none":
        return build(RL, options)
    try:
        value = float(margin)
    except (TypeError, ValueError):
        raise ValueError(f"preempt_margin must be a number >= 0 or none, got {margin!r}") from None
    return build(RLPreempting, {**options, "preempt_margin": value})

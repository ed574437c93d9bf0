"""`elasticflow`: ElasticFlow (Gu et al., ASPLOS'23) on the snapshot, step by step after the
original's `scheduler.py` (pkusys/ElasticFlow); docs/policies.md names each place and what
still differs.

1. Admission (`ef_sim_jobs_access_control`, sticky): a new deadline job is admitted only if,
   planned with every admitted job earliest deadline first, it ends by its deadline and no
   admitted job that made its deadline before now misses it. Otherwise it is declined, for
   good; an admitted job is never dropped. What a declined job gets is the `declined` option:
   `best-effort` (the default) runs it best-effort, as the original runs a job flagged
   `best_effort` that fails admission; `drop` drops it, as the original drops every other job
   that fails admission (`JOBS.move_to_declined`): in the simulator it never runs
   (capabilities.Dropping); live the daemon cancels nothing, so the policy only never starts
   it and ranks it last (docs/policies.md). The drop form's name is `elasticflow-drop`, also
   registered under that name.
2. Plan (`estimate_all_jobs` + `ef_sim_allocation`): every admitted job, running or pending, is
   planned afresh each decision, EDF, over the free-GPU profile: its minimum satisfactory share,
   planned backwards from its deadline and counted in work (elasticflow/plan.py).
3. Now: admitted jobs take their planned count at now (a pending one starts; a running one
   grows, or is shrunk — suspended where its plan gives it 0 — only when an admitted job needs
   its GPUs); best-effort jobs (no deadline, or declined) start at their minimum where the
   profile has room for it to its end.
4. Leftover GPUs (`allocate_free_gpus` / `get_marginal`): one allowed step at a time to the job
   whose GPU-time grows least per extra GPU (jobs planned to wait first), with no threshold, as
   long as the step makes the job faster (after the restart cost, for a running job).
Every start and resize is checked on the nodes (elasticflow/nodes.py) in the order the engine
applies them. Allowed counts are powers of two (`gpu_counts.allowed_counts`), capped per model
where the throughput curve peaks (more GPUs would slow it down).

Inside the package (private to it): round.py (one round: the base profile, admission and plans,
the allocation now, leftover GPUs, the Decision), plan.py (the free-GPU profile and one job's
plan), base.py (the fast build of the base profile), nodes.py (free GPUs per node), jobs.py
(per-job estimates and the admissions kept between calls, `Sticky`). In the simulator the
policy is `Gated`: `futile` judges the newcomers (admission at arrival) and lets the call be
skipped only where nothing could start, resize or be suspended (exact: the same results as
asking `decide` at every event, tests/policies/test_elasticflow_gate.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, cast

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView
from slurm_rl.policies.capabilities import (
    CycleState,
    Declining,
    Dropping,
    Gated,
    Preempting,
    Resizing,
    Stateful,
)
from slurm_rl.policies.capacity import may_start
from slurm_rl.policies.elasticflow.jobs import Sticky, deadline_of, resizable
from slurm_rl.policies.elasticflow.round import Round
from slurm_rl.policies.options import build

NAME = "elasticflow"
DROP_NAME = "elasticflow-drop"
"""The name of the form that drops declined jobs (`declined="drop"`)."""
_CYCLE_KEY = NAME
"""Where `futile` leaves its round for `decide` (capabilities.CycleState)."""


class Declined(enum.Enum):
    """What a job declined at admission gets."""

    BEST_EFFORT = "best-effort"
    """It runs best-effort (at its minimum, where the admitted jobs' plans leave room)."""
    DROP = "drop"
    """It is dropped: never started (the simulator removes it; live it waits last)."""


@dataclass(frozen=True, kw_only=True)
class ElasticFlow:
    name: str = field(default=NAME, init=False)
    resize_cost_s: float = 30.0
    """Restart time a resize costs a running job (checkpoint, requeue, reload): planned as lost
    work, and a leftover step must save more than it."""
    declined: Declined | str = Declined.BEST_EFFORT
    """What a declined job gets: "best-effort" (the default) or "drop"."""
    _sticky: Sticky = field(default_factory=Sticky, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.resize_cost_s < 0:
            raise ValueError("resize_cost_s must be >= 0")
        valid = [d.value for d in Declined]
        if self.declined not in valid and not isinstance(self.declined, Declined):
            raise ValueError(f"declined must be one of {', '.join(map(repr, valid))}, "
                             f"got {self.declined!r}")
        declined = Declined(self.declined)
        object.__setattr__(self, "declined", declined)
        object.__setattr__(self, "name", DROP_NAME if declined is Declined.DROP else NAME)
        self._sticky.drop = declined is Declined.DROP

    def may_resize(self, job: JobView) -> bool:
        """Resizing (capabilities.py): running elastic managed jobs with a GPU range."""
        return resizable(job)

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): the same jobs, suspended (requeued; they checkpoint)
        when their plan gives them no GPUs and an earlier deadline needs theirs, as the
        original gives a job 0 GPUs."""
        return resizable(job)

    def reset(self) -> None:
        """Stateful (capabilities.py): forget admissions (a new run)."""
        self._sticky.clear()

    def take_dropped(self) -> tuple[JobId, ...]:
        """Dropping (capabilities.py): the jobs declined since the last call, with
        `declined="drop"` (none otherwise)."""
        out, self._sticky.to_drop = tuple(self._sticky.to_drop), []
        return out

    @property
    def declined_jobs(self) -> int:
        """Jobs declined at admission since the last reset (metrics.Declining)."""
        return self._sticky.declined_total

    def futile(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> bool:
        """Gated (capabilities.py), asked by the simulator instead of `decide` at each point
        where it may skip a call. Admission is judged when a job arrives, as the original does:
        here too (the verdicts are the state `decide` would leave). True where the Decision
        could change nothing (`_may_act`); else the round and its admissions go to `decide`
        on the same snapshot through `cycle`."""
        r = Round(snapshot, self.resize_cost_s, self._sticky)
        adm = r.plan() if _needs_plan(r) else None
        if _may_act(r):
            if cycle is not None:
                cycle.write(_CYCLE_KEY, (r, adm))
            return False
        return True

    def decide(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> Decision:
        ready = None if cycle is None else cycle.read(_CYCLE_KEY)
        if ready is not None:
            r, adm = cast(tuple[Round, Any], ready)
        else:
            r, adm = Round(snapshot, self.resize_cost_s, self._sticky), None
        if adm is None:
            adm = r.plan()
        r.allocate_now(adm)
        r.leftover(adm)
        return r.decision(self.name, adm)


def _needs_plan(r: Round) -> bool:
    """Whether `r.plan()` would judge a job (a deadline job not yet admitted or declined):
    otherwise it changes no verdict."""
    admitted, declined = r.sticky.admitted, r.sticky.declined
    return any(j.id not in admitted and j.id not in declined and not j.held
               and deadline_of(j) is not None for j in r.pending)


def _may_act(r: Round) -> bool:
    """False only where the round's Decision could change nothing the simulator does now or
    later: no running job it may resize or suspend, and no pending job fits the free GPUs
    (capacity.may_start), so nothing starts whatever the order says (and until the next event
    nothing frees GPUs)."""
    if r.elastic:
        return True
    nodes = r.nodes
    return may_start(r.snapshot.pending, max(nodes.free, default=0), nodes.total_free,
                     nodes.cap)


def new(**options: Any) -> ElasticFlow:
    """Options: resize_cost_s (30.0), declined ("best-effort" or "drop")."""
    return build(ElasticFlow, options)


def new_drop(**options: Any) -> ElasticFlow:
    """`elasticflow-drop`: `elasticflow` with declined="drop" (its own registered name, so an
    evaluation can run both forms side by side). Options: resize_cost_s (30.0)."""
    if "declined" in options:
        raise ValueError(f"{DROP_NAME} drops declined jobs: it takes no 'declined' option "
                         f"(use {NAME} with declined=...)")
    return build(ElasticFlow, {**options, "declined": Declined.DROP.value})


# The capabilities it declares (capabilities.py), checked by mypy.
_resizing: type[Resizing] = ElasticFlow
_preempting: type[Preempting] = ElasticFlow
_gated: type[Gated] = ElasticFlow
_stateful: type[Stateful] = ElasticFlow
_declining: type[Declining] = ElasticFlow
_dropping: type[Dropping] = ElasticFlow

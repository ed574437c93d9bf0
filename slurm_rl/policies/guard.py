"""A learned policy under a queue-health guard: jobs that starve under the learned policy get
what the fallback (`gittins`) would give them.

A learned policy can be excellent on the workloads it was trained on and disastrous in a regime
it never saw: long, wide jobs holding every GPU while thousands of few-minute jobs queue behind
them, for days. The guard bounds that structurally, with a rule an admin can read:

  A job is **starving** when it has waited `wait_s` (30 min) or longer, and the fallback would
  requeue running jobs for it now: `gittins` ranks it more than (1 + its margin) times above
  running jobs it may preempt whose current run has lasted `victim_run_s` (6 h, past which
  `rl` never requeues a run itself), and stopping those jobs frees room for it (free GPUs and
  node layout counted as the fallback's own preemption plan counts them). Only runs whose
  requeue would be carried out count (`JobView.restartable`: live, jobs that opted in with
  `--rl-elastic`): a job that waits behind runs nobody may requeue gets nothing from the
  fallback, and putting it first with requeues that are refused made `rl` slower than `sjf`
  where no job opted in (docs/evaluation.md, "Under the daemon's rules").

What the guard then does (`mode`):
- override (the default): the learned policy's decision stands, except that the jobs
  starving now go first, with the requeues the fallback would make for them (of runs the
  learned policy does not requeue already). Everything else keeps the learned order.
- switch: the fallback decides everything while a job starves and for `hold_s` after the last
  time one did; then the learned policy decides again.

So no job waits much longer than `wait_s` for GPUs the fallback would have given it, and a
regime the learned policy handles well costs little: the guard rarely fires there
(docs/rl.md, "The guard", has the measured cost and the comparison of the two modes). The
monitor looks at most once per `check_s` of snapshot time, reads no true durations, and is
the same in the simulator and in the daemon.

The guard keeps state between calls (`Stateful`): when a job last starved, whether the guard
is on, and the number of switches. `guard_status()` tells it (capabilities.Guarding: the
simulator's result, the daemon's metrics and log). Each decision the guard changes carries a
note beginning with `NOTE`, which `slurm-rl status` and `explain` show.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Protocol

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobOrder, JobView
from slurm_rl.policies.capabilities import CycleState, Gated, GuardStatus, Preempting, Stateful
from slurm_rl.policies.capacity import Capacity, job_layout, job_parts
from slurm_rl.policies.gittins import Gittins
from slurm_rl.policies.preemption import plan_preemptions_by_prefix

_CYCLE_KEY = "guard"
MODES = ("switch", "override")
NOTE = "guard: "
"""How every note the guard adds to a decision begins (`slurm-rl status` and `explain` show
such notes)."""
_MOST_CHECKED = 64
"""Starving candidates checked against the node layout per check, highest priority first."""


@dataclass(frozen=True, kw_only=True)
class GuardConfig:
    """The queue-health guard's rule and thresholds (policy options `guard_mode`,
    `guard_wait_s`, `guard_victim_run_s`, `guard_hold_s`, `guard_check_s`; `guard=off`
    switches it off). The defaults are measured in docs/rl.md ("The guard")."""

    mode: str = "override"
    """override: the learned policy's decision stands, but the jobs starving now go first,
    with the requeues the fallback would make for them; switch: the fallback decides
    everything while a job starves and for hold_s after."""
    wait_s: float = 1800.0
    """A job that has waited this long for GPUs the fallback would give it is starving."""
    victim_run_s: float = 21600.0
    """Only running jobs whose current run has lasted this long count as ones the fallback
    would requeue: 6 h, rl's own protect_run_s, past which rl never requeues a run itself."""
    hold_s: float = 0.0
    """The guard stays on this long after the last starving job was seen (switch: 3600 is a
    sensible value; override needs none: it acts on the jobs starving at each decision)."""
    check_s: float = 60.0
    """The monitor looks at most once per this much snapshot time."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"guard_mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name in ("wait_s", "victim_run_s", "hold_s", "check_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"guard_{name} must be a number >= 0, got {v!r}")


@dataclass(frozen=True, kw_only=True)
class Starving:
    """A job the monitor found starving: how long it waited, and how many running jobs the
    fallback would requeue for it."""

    job: JobView
    waited_s: float
    victims: int

    def why(self) -> str:
        return (f"job {self.job.id} ({self.job.gpus} GPUs) waited {_span(self.waited_s)} while "
                f"{self.victims} running job(s) the fallback would requeue for it hold the GPUs")


@dataclass(frozen=True, kw_only=True)
class Starvation:
    """The starving jobs of one snapshot (at most a few, highest fallback priority first)
    and what the fallback would requeue for them: `victims`, lowest priority first, with
    `bounds` (1 + margin) x their priority, and each starving job's priority."""

    jobs: tuple[Starving, ...]
    victims: tuple[JobView, ...]
    bounds: tuple[float, ...]
    priority: dict[JobId, float]


def starvation(snapshot: ClusterSnapshot, fallback: Gittins, config: GuardConfig,
               *, enough: int | None = None,
               kept: dict[JobId, tuple[JobView, float]] | None = None) -> Starvation | None:
    """The starving jobs of `snapshot` by the rule in the module's docstring (stopping at
    `enough` of them); None when none starves. Cost: one pass over pending and running jobs,
    and a node-layout check for at most a few candidates. `kept`: the fallback's priority of
    pending views seen before (a pending view's priority does not move), updated here."""
    now = snapshot.time
    limit = now - config.wait_s
    waiting = [j for j in snapshot.pending
               if j.submit_time <= limit and j.managed and not j.held]
    if not waiting:
        return None
    run_s = config.victim_run_s
    ran = now - run_s
    victims = [v for v in snapshot.running
               if (run_s <= 0 or (v.start_time is not None and v.start_time <= ran))
               and fallback.may_preempt(v)]
    if not victims:
        return None
    k = 1.0 + fallback.margin
    index = fallback.index_of
    ranked = sorted(((index(v), v) for v in victims), key=lambda e: e[0])
    bounds = [k * p for p, _ in ranked]
    held = list(accumulate(v.gpus for _, v in ranked))
    cap = Capacity.of(snapshot)
    free, node_cap = cap.total_free, cap.node_cap
    if kept is None:
        kept = {}
    scored = []
    for j in waiting:
        e = kept.get(j.id)
        if e is None or e[0] is not j:
            e = kept[j.id] = (j, index(j))
        scored.append((e[1], j))
    candidates = sorted(scored, key=lambda e: -e[0])
    found: list[Starving] = []
    prio: dict[JobId, float] = {}
    for p, j in candidates[:_MOST_CHECKED]:
        n = bisect_left(bounds, p)  # the victims it outranks: a prefix of `ranked`
        if n == 0:
            break  # (candidates in descending priority: none after it outranks any)
        if free + held[n - 1] < j.gpus:
            continue
        trial = cap.copy()
        for _, v in ranked[:n]:
            trial.release(job_layout(v, None, node_cap))
        if trial.fits(job_parts(j, None, node_cap)):
            found.append(Starving(job=j, waited_s=now - j.submit_time, victims=n))
            prio[j.id] = p
            if enough is not None and len(found) >= enough:
                break
    if not found:
        return None
    return Starvation(jobs=tuple(found), victims=tuple(v for _, v in ranked),
                      bounds=tuple(bounds), priority=prio)


def starving(snapshot: ClusterSnapshot, fallback: Gittins,
             config: GuardConfig | None = None) -> Starving | None:
    """The highest-priority starving job of `snapshot` (None: none starves)."""
    found = starvation(snapshot, fallback, config or GuardConfig(), enough=1)
    return found.jobs[0] if found is not None else None


class Primary(Protocol):
    """The policy under the guard (`core.Policy`, its name read-only as a frozen dataclass's
    is)."""

    @property
    def name(self) -> str: ...

    def decide(self, snapshot: ClusterSnapshot) -> Decision: ...


class Guarded:
    """`primary` (a learned policy) under the queue-health guard, with `fallback` deciding
    while jobs starve. Preempting (either may requeue), Stateful, and Gated when the primary
    is (the fallback is asked at every event, as it would be on its own)."""

    def __init__(self, primary: Primary, fallback: Gittins,
                 config: GuardConfig | None = None) -> None:
        self.primary = primary
        self.fallback = fallback
        self.config = config or GuardConfig()
        self.name = primary.name
        # The primary's capabilities, looked up once (a Protocol isinstance check costs more
        # than many a decision's work, and the guard asks at every event and for every job).
        self._gated: Gated | None = primary if isinstance(primary, Gated) else None
        self._preempting: Preempting | None = (primary if isinstance(primary, Preempting)
                                               else None)
        self._last_starved = -math.inf
        """Snapshot time a starving job was last seen."""
        self._why = ""
        self._checked = -math.inf
        self._active = False
        self._since: float | None = None
        self._switches = 0
        self._kept: dict[JobId, tuple[JobView, float]] = {}
        """The fallback's priority of pending views (starvation's `kept`)."""
        self._found: tuple[float, Starvation | None] = (-math.inf, None)
        """The last look: (its snapshot time, what it found)."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Guarded):
            return NotImplemented
        return ((self.primary, self.fallback, self.config)
                == (other.primary, other.fallback, other.config))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Guarded({self.primary!r}, fallback={self.fallback.name}, {self.config})"

    # -- capabilities ----------------------------------------------------------------------

    def may_preempt(self, job: JobView) -> bool:
        """Preempting: a job either policy could requeue."""
        return self.fallback.may_preempt(job) or (
            self._preempting is not None and self._preempting.may_preempt(job))

    def reset(self) -> None:
        """Stateful: forget the guard's state and the primary's (a new run)."""
        if isinstance(self.primary, Stateful):
            self.primary.reset()
        self.__init__(self.primary, self.fallback, self.config)  # type: ignore[misc]

    def guard_status(self) -> GuardStatus:
        """Guarding (capabilities.py): the mode, the switches so far and why."""
        return GuardStatus(fallback_active=self._active, switches=self._switches,
                           since=self._since, why=self._why)

    # -- deciding --------------------------------------------------------------------------

    def _watch(self, snapshot: ClusterSnapshot, cycle: CycleState | None) -> bool:
        """Look at the queue (at most once per check_s) and set the mode; True while the
        fallback decides. One look per decision point: `futile` and `decide` share it."""
        if cycle is not None and cycle.read(_CYCLE_KEY) is not None:
            return self._active
        now, cfg = snapshot.time, self.config
        if now - self._checked >= cfg.check_s or now < self._checked:
            self._checked = now
            if len(self._kept) > 4 * len(snapshot.pending) + 64:  # (it keeps pending views)
                self._kept.clear()
            # (override acts on every starving job: the whole look; switch needs the first)
            found = starvation(snapshot, self.fallback, cfg, kept=self._kept,
                               enough=None if cfg.mode == "override" else 1)
            self._found = (now, found)
            if found is not None:
                self._last_starved, self._why = now, found.jobs[0].why()
        active = now - self._last_starved < cfg.hold_s or (
            cfg.hold_s == 0 and now == self._last_starved)
        if active != self._active:
            self._active, self._since = active, now
            self._switches += 1
        if cycle is not None:
            cycle.write(_CYCLE_KEY, True)
        return active

    def futile(self, snapshot: ClusterSnapshot, cycle: CycleState) -> bool:
        """Gated: the primary's own rule while it decides; never while the fallback does."""
        if self._watch(snapshot, cycle):
            return False
        if self._gated is not None:
            return self._gated.futile(snapshot, cycle)
        return False

    def decide(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> Decision:
        if not self._watch(snapshot, cycle):
            if cycle is not None and self._gated is not None:
                return self._gated.decide(snapshot, cycle)
            return self.primary.decide(snapshot)
        if self.config.mode == "override":
            return self._override(snapshot, cycle)
        d = self.fallback.decide(snapshot)
        note = (f"{NOTE}decided by the fallback {self.fallback.name} because "
                f"{self._why}; {self.name} decides again {_span(self.config.hold_s)} after "
                "no job starves")
        return Decision(policy=f"{self.fallback.name} (guard of {self.name})", order=d.order,
                        resizes=d.resizes, preemptions=d.preemptions, notes=(*d.notes, note))

    def _override(self, snapshot: ClusterSnapshot, cycle: CycleState | None) -> Decision:
        """The primary's decision, with the jobs starving now first and the requeues the
        fallback would make for them (of runs the primary does not requeue already)."""
        if cycle is not None and self._gated is not None:
            d = self._gated.decide(snapshot, cycle)
        else:
            d = self.primary.decide(snapshot)
        at, found = self._found
        if at != snapshot.time:  # (hold_s: on, between looks)
            found = starvation(snapshot, self.fallback, self.config, kept=self._kept)
        if found is None:
            return d
        stopped = {p.job_id for p in d.preemptions}
        keep = [i for i, v in enumerate(found.victims) if v.id not in stopped]
        victims = [found.victims[i] for i in keep]
        bounds = [found.bounds[i] for i in keep]
        prio = found.priority
        movers = [s.job for s in found.jobs]
        name = self.fallback.name
        extra, starts = plan_preemptions_by_prefix(
            Capacity.of(snapshot), movers, victims,
            prefix=lambda p, _: bisect_left(bounds, prio[p.id]),
            reason=lambda v, p: (f"guard of {self.name}: job {p.id} starves; {name} ranks it "
                                 f"above this run"))
        first = [s for s in found.jobs if s.job.id in starts]
        if not first:
            return d
        ids = {s.job.id for s in first}
        gpus = {o.job_id: o.gpus for o in d.order}
        m = len(first)
        top = [JobOrder(job_id=s.job.id, rank=i, gpus=gpus.get(s.job.id),
                        reason=f"guard of {self.name}: starving, {s.why()}")
               for i, s in enumerate(first)]
        rest = [replace(o, rank=o.rank + m) for o in d.order if o.job_id not in ids]
        note = (f"{NOTE}{m} starving job(s) first, {len(extra)} requeue(s) "
                f"the fallback {name} would make for them; {first[0].why()}")
        return Decision(policy=d.policy, order=(*top, *rest), resizes=d.resizes,
                        preemptions=(*d.preemptions, *extra), notes=(*d.notes, note))


def _span(s: float) -> str:
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.0f} min"
    if s < 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"

"""`sjf`: shortest job first by the duration the policy can KNOW. Non-preemptive.

Reads no true durations. A pending job's expected run time is, first found:
  1. the prediction, the job's own progress, or intent.total_steps at the profiled throughput
     of its model (`estimates.estimate_remaining`);
  2. the mean observed run time of this user's jobs at this GPU count, then of this user's jobs
     (at least `min_history` samples each; the last `history_window` kept);
  3. the Slurm time limit (an upper bound that users often pad);
  4. the mean observed run time of all jobs, then `default_s`.
History is the only state this policy keeps (`Observing`, so the simulator shows it every event;
`reset()` forgets it): it remembers running jobs' start times and, when a
job is seen finished (or gone from the snapshot), records end − start of its last run. Between
runs of a requeued job nothing is recorded. For a history-based estimate the job's attained
service (attained_gpu_s / gpus) is subtracted. Ties by submit time, then id. Never changes GPU
counts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobOrder, JobView, RunningChanges
from slurm_rl.policies.estimates import estimate_remaining
from slurm_rl.policies.formatting import fmt_dur
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import Ranked, managed_pending, orders, submit_key

NAME = "sjf"

_Key = tuple[str, int] | str | None  # (user, gpus), user, or None for all jobs


@dataclass(frozen=True, kw_only=True)
class Sjf:
    name: str = field(default=NAME, init=False)
    default_s: float = 3600.0
    """Expected run time when nothing at all is known."""
    history_window: int = 50
    """Observed run times kept per history key."""
    min_history: int = 3
    """Samples a history key needs before its mean is used."""
    _running: dict[JobId, tuple[float, str, int]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _history: dict[_Key, deque[float]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _mem: _Memory = field(default_factory=lambda: _Memory(), init=False, repr=False,
                          compare=False)

    def __post_init__(self) -> None:
        if self.default_s <= 0 or self.history_window < 1 or self.min_history < 1:
            raise ValueError("default_s must be > 0, history_window and min_history >= 1")

    # -- history (capabilities.Observing) ------------------------------------------------------

    def reset(self) -> None:
        """Forget every run time and every running job seen."""
        self._running.clear()
        self._history.clear()
        object.__setattr__(self, "_mem", _Memory())

    def _record(self, user: str, gpus: int, seconds: float) -> None:
        mem = self._mem
        for key in ((user, gpus), user, None):
            self._history.setdefault(key, deque(maxlen=self.history_window)).append(seconds)
            mem.means.pop(key, None)
        mem.version += 1

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """Record the runs of jobs seen finished or gone; remember running jobs' starts."""
        mem = self._mem
        ids = snapshot.running_ids
        if ids is mem.running_ids:
            # The same object as at the last call: no job started or ended since
            # (`ClusterSnapshot.running_ids`), so this call would change nothing.
            return
        changes = snapshot.running_changes
        if (changes is None or changes.since is not mem.running_ids
                or not self._observe_changes(changes, snapshot.time)):
            self._observe_all(snapshot)
        mem.running_ids = ids

    def _observe_all(self, snapshot: ClusterSnapshot) -> None:
        seen: set[JobId] = set()
        for j in snapshot.jobs:
            seen.add(j.id)
            if j.state.is_running and j.start_time is not None:
                self._running[j.id] = (j.start_time, j.user, j.gpus)
            elif j.id in self._running:
                start, user, gpus = self._running.pop(j.id)
                if j.state.is_finished:
                    end = j.end_time if j.end_time is not None else snapshot.time
                    self._record(user, gpus, max(0.0, end - start))
        for jid in [k for k in self._running if k not in seen]:
            start, user, gpus = self._running.pop(jid)
            self._record(user, gpus, max(0.0, snapshot.time - start))

    def _observe_changes(self, changes: RunningChanges, now: float) -> bool:
        """`_observe_all` from what changed since the last call (its `running_ids`): the same
        starts remembered and runs recorded, in the same order. False (nothing done): a
        stopped job is listed finished, whose record _observe_all orders by the snapshot."""
        stopped = changes.stopped
        running = self._running
        gone: list[JobId] = []
        for jid, view in stopped:
            if view is None:
                if jid in running:
                    gone.append(jid)
            elif view.state.is_finished:
                return False
        for jid, view in stopped:
            if view is not None:
                running.pop(jid, None)  # pending again: its run is not recorded
        for j in changes.started:
            if j.start_time is not None:
                running[j.id] = (j.start_time, j.user, j.gpus)
            else:
                running.pop(j.id, None)
        if len(gone) > 1:  # recorded in the order of `_running`, as _observe_all does
            at = set(gone)
            gone = [k for k in running if k in at]
        for jid in gone:
            start, user, gpus = running.pop(jid)
            self._record(user, gpus, max(0.0, now - start))
        return True

    def _mean(self, key: _Key) -> tuple[float, int] | None:
        means = self._mem.means
        if key in means:
            return means[key]
        runs = self._history.get(key)
        m = None if runs is None or len(runs) < self.min_history else (
            sum(runs) / len(runs), len(runs))
        means[key] = m
        return m

    # -- decision ---------------------------------------------------------------------------

    def expected(self, job: JobView, now: float) -> tuple[float, str]:
        """Expected remaining run time and where it came from."""
        return self._expected(job, now)[0]

    def _expected(self, job: JobView, now: float) -> tuple[tuple[float, str], bool]:
        """expected(), and whether it came from history (or from its absence)."""
        est = estimate_remaining(job, now, time_limit=False)
        if est is not None:
            return (est.seconds, est.label), False
        return self._from_history(job), True

    def _from_history(self, job: JobView) -> tuple[float, str]:
        attained = job.attained_gpu_s / max(job.gpus, 1)
        for key, label in (((job.user, job.gpus), f"user {job.user!r} at {job.gpus} GPUs"),
                           (job.user, f"user {job.user!r}")):
            m = self._mean(key)
            if m is not None:
                return max(0.0, m[0] - attained), f"history of {label}, {m[1]} runs"
        if job.time_limit_s is not None:
            return job.time_limit_s, "time limit"
        m = self._mean(None)
        if m is not None:
            return max(0.0, m[0] - attained), f"history of all jobs, {m[1]} runs"
        return self.default_s, "default (nothing known)"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.observe(snapshot)
        now, mem = snapshot.time, self._mem
        old, version = mem.scored, mem.version
        scored: dict[JobId, _Scored] = {}
        fresh: list[_Scored] = []
        for j in managed_pending(snapshot):
            e = old.get(j.id)
            # An estimate stands while the job's view is the same object (views are immutable;
            # a pending job's estimate does not move with the clock) and, for one from
            # history, no run was recorded since.
            if e is None or e.view is not j or (e.version is not None and e.version != version):
                (s, src), hist = self._expected(j, now)
                e = _Scored(key=(s, submit_key(j)), view=j, version=version if hist else None,
                            entry=(j, _Why(s, src), None))
                fresh.append(e)
            scored[j.id] = e
        # The last ranking, less the jobs that left or changed, is still in order: sorting it
        # with the new entries appended costs about one pass (Timsort merges the two runs).
        ranking = [e for e in mem.ranking if scored.get(e.view.id) is e]
        ranking += fresh
        ranking.sort(key=_by_key)
        ranked = [e.entry for e in ranking]
        made = orders(ranked, reuse=(mem.ranked, mem.orders))
        mem.scored, mem.ranking, mem.ranked, mem.orders = scored, ranking, ranked, made
        return Decision(policy=self.name, order=made)


@dataclass(frozen=True, slots=True)
class _Why:
    """A ranked job's reason, formatted only when read (`core.JobOrder.reason`)."""

    seconds: float
    source: str

    def __call__(self) -> str:
        return f"expected {fmt_dur(self.seconds)} ({self.source})"


@dataclass(slots=True)
class _Scored:
    key: tuple[float, tuple[float, tuple[tuple[int, str], ...]]]
    """(expected seconds, submit_key): the ranking's order."""
    view: JobView
    version: int | None
    """History version the estimate was made at (None: it does not come from history)."""
    entry: Ranked


def _by_key(e: _Scored) -> tuple[float, tuple[float, tuple[tuple[int, str], ...]]]:
    return e.key


@dataclass
class _Memory:
    """What one decision leaves for the next, rebuilt from nothing at any time (reset)."""

    means: dict[_Key, tuple[float, int] | None] = field(default_factory=dict)
    """Mean run time per history key (dropped when the key records a run)."""
    version: int = 0
    """Runs recorded so far: a history-based estimate older than this is redone."""
    running_ids: frozenset[JobId] | None = None
    """The running ids object of the last observed snapshot."""
    scored: dict[JobId, _Scored] = field(default_factory=dict)
    ranking: list[_Scored] = field(default_factory=list)
    ranked: list[Ranked] = field(default_factory=list)
    orders: tuple[JobOrder, ...] = ()


def new(**options: Any) -> Sjf:
    """Options: default_s (3600.0), history_window (50), min_history (3)."""
    return build(Sjf, options)

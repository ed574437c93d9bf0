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

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView
from slurm_rl.policies.estimates import estimate_remaining
from slurm_rl.policies.formatting import fmt_dur
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import managed_pending, orders, submit_key

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

    def __post_init__(self) -> None:
        if self.default_s <= 0 or self.history_window < 1 or self.min_history < 1:
            raise ValueError("default_s must be > 0, history_window and min_history >= 1")

    # -- history (capabilities.Observing) ------------------------------------------------------

    def reset(self) -> None:
        """Forget every run time and every running job seen."""
        self._running.clear()
        self._history.clear()

    def _record(self, user: str, gpus: int, seconds: float) -> None:
        for key in ((user, gpus), user, None):
            self._history.setdefault(key, deque(maxlen=self.history_window)).append(seconds)

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """Record the runs of jobs seen finished or gone; remember running jobs' starts."""
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

    def _mean(self, key: _Key) -> tuple[float, int] | None:
        runs = self._history.get(key)
        if runs is None or len(runs) < self.min_history:
            return None
        return sum(runs) / len(runs), len(runs)

    # -- decision ---------------------------------------------------------------------------

    def expected(self, job: JobView, now: float) -> tuple[float, str]:
        """Expected remaining run time and where it came from."""
        est = estimate_remaining(job, now, time_limit=False)
        if est is not None:
            return est.seconds, est.source.value
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
        scored = [(self.expected(j, snapshot.time), j) for j in managed_pending(snapshot)]
        scored.sort(key=lambda e: (e[0][0], submit_key(e[1])))
        ranked = ((j, f"expected {fmt_dur(s)} ({src})", None) for (s, src), j in scored)
        return Decision(policy=self.name, order=orders(ranked))


def new(**options: Any) -> Sjf:
    """Options: default_s (3600.0), history_window (50), min_history (3)."""
    return build(Sjf, options)

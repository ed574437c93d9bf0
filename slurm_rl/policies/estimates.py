"""What a policy can know about a job's remaining run time (never the true duration: that
reaches only oracle policies, through `capabilities.Oracle`), and that time at another GPU count.

Every size a job states about itself is a claim, and claims are checked here, in the one place
every size-based policy reads them (`sjf`, `rl`, `deadline`, `elasticflow`):

- progress (steps done, rate, and the daemon's prediction made from them) counts only once the
  job has run, and only while it is consistent with the model's measured throughput: steps done
  at most `PROFILE_SLACK` times what the model's fastest measured per-GPU rate gives over the
  GPU-seconds the job has had, and a rate at most `PROFILE_SLACK` times the measured rate at its
  GPU count (a model without a measured curve cannot be checked this way);
- a running job that has run past the end its own claims stated (`JobView.claim_overrun`, set by
  the daemon, which remembers what each claim said) is estimated from what was observed, as
  attained service is: about as long again as it has run so far, capped by its time limit;
- claims are stretched by the owner's record (`JobView.claim_ratio`: how much longer than
  claimed the user's recent jobs ran); a user whose claims were off by more than the daemon's
  tolerance has them not believed at all (ratio inf), so that a lie buys nothing: the job is
  estimated as if it had claimed nothing (its time limit, or the policy's history).

A Slurm time limit is not a claim: slurmctld enforces it.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, TypeAlias

from slurm_rl import perfmodel
from slurm_rl.core import ClusterSnapshot, JobId, JobView, Progress

PROFILE_SLACK = perfmodel.PROFILE_SLACK
"""How much faster than its model's measured throughput a job's progress may claim to be
before it is not believed (perfmodel.py)."""


class Source(enum.Enum):
    """Where a remaining-time estimate came from (named in reasons)."""

    PREDICTED = "predicted"
    PROGRESS = "progress"
    PROFILE = "steps at profiled throughput"
    TIME_LIMIT = "time limit"
    HISTORY = "history"
    DEFAULT = "default"
    OBSERVED = "observed run time (claim overrun)"


@dataclass(frozen=True, kw_only=True)
class Estimate:
    seconds: float
    """Remaining run time at `gpus`."""
    gpus: int
    source: Source
    ratio: float = 1.0
    """The owner's record the claim was stretched by (1: not stretched)."""

    @property
    def label(self) -> str:
        """Where it came from, for a reason string."""
        if self.ratio == 1.0:
            return self.source.value
        return f"{self.source.value} x{self.ratio:.3g} by the owner's record"


def has_run(job: JobView) -> bool:
    """Whether the job is running or has run (only then can it have made progress)."""
    return job.state.is_running or job.attained_gpu_s > 0 or job.restarts > 0


def believed_progress(job: JobView) -> Progress | None:
    """The job's progress report if it is believable (see the module's docstring), else None."""
    return _believed(job, job.progress)


def _believed(job: JobView, p: Progress | None) -> Progress | None:
    """`believed_progress` of `job`, whose progress (read once: it may be computed) is `p`."""
    if p is None or job.claim_overrun or not has_run(job):
        return None
    intent = job.intent
    model = _measured(intent.model) if intent is not None and intent.model else None
    if model is None:
        return p
    if p.steps_done > PROFILE_SLACK * _peak_per_gpu(model) * job.attained_gpu_s + 1:
        return None
    if p.rate is not None and p.rate > PROFILE_SLACK * perfmodel.fastest(model, max(job.gpus, 1)):
        return None
    return p


@lru_cache(maxsize=256)
def _measured(model: str) -> str | None:
    """The model's name as the measured curves know it (None: no curve to check against)."""
    name = model.lower()
    return name if name in perfmodel.curves() else None


def impossible_progress(job: JobView, now: float) -> bool:
    """Whether the job reports progress it could not have made even had it run at its model's
    fastest measured rate (x `PROFILE_SLACK`) from its submission to its report: more steps
    than that, or a faster rate. (A report the job merely has not earned yet, before it ran, is
    `believed_progress`'s business; this one is a wrong claim the daemon holds against its
    owner.) A model without a measured curve cannot be judged: False.

    The steps are not judged for a job that was restarted (`restarts`): Slurm gives a requeued
    job the requeue's time as its submit time, so the progress of its earlier runs would be
    judged as made since then (live, every job the daemon preempted turned its owner's claims
    into wrong ones while it waited to run again). Its rate still is, and once it runs its
    claims are held to its run (daemon/claims.py)."""
    p = job.progress
    intent = job.intent
    if p is None or intent is None or not intent.model:
        return False
    fastest = perfmodel.rate_ceiling(intent.model, job.gpus)
    if fastest is None:
        return False
    if p.rate is not None and p.rate > fastest:
        return True
    if job.restarts > 0:
        return False
    at = p.updated_at if p.updated_at is not None else now
    return p.steps_done > fastest * max(0.0, at - job.submit_time) + 1


def claims_stand(job: JobView) -> bool:
    """Whether the job's own claims are taken as they stand: the owner's record leaves them as
    they are (ratio 1), the job has not overrun them, and its progress, if any, is believed.
    Then `estimate_remaining` is its `predicted_remaining_s` (at least 0) where that is set,
    so a policy may read the predictions of such running jobs all at once
    (`ClusterSnapshot.running_predicted`) instead of estimating each."""
    if job.claim_overrun or job.claim_ratio != 1.0:
        return False
    p = job.progress
    return p is None or _believed(job, p) is not None


def predictions_stand(snapshot: ClusterSnapshot) -> list[bool]:
    """For each running job, in `snapshot.running` order: whether it has a prediction
    (`running_predicted`) and its claims stand (`claims_stand`). The same answers as
    `[p is not None and claims_stand(v) for v, p in zip(running, running_predicted)]`, read
    from the snapshot's per-running-job tuples (`running_steps`, `running_attained`), so that
    no job's `Progress` is built: a plan that holds each running job to its prediction asks
    this for every running job at every decision. `StandingClaims` keeps what does not move
    with the clock between calls."""
    return _stand(_fixed(snapshot.running), snapshot)


class StandingClaims:
    """`predictions_stand`, with each running job's part of the verdict that does not move
    with the clock (its overrun, its owner's record, its model's bounds) kept with the running
    set it was found in (`ClusterSnapshot.running_ids`: the same object means the same runs
    with the same fixed fields) and carried to the next set through `running_changes` where
    the snapshot gives them (only the runs started since are looked at). One per policy
    instance; bounded by one running set."""

    __slots__ = ("_by_id", "_fixed", "_ids")

    def __init__(self) -> None:
        self._ids: frozenset[JobId] | None = None
        self._fixed: list[_Fixed] = []
        self._by_id: dict[JobId, _Fixed] = {}

    def __call__(self, snapshot: ClusterSnapshot) -> list[bool]:
        ids = snapshot.running_ids
        if ids is not self._ids:
            running = snapshot.running
            changes = snapshot.running_changes
            by_id = self._by_id
            if self._ids is not None and changes is not None and changes.since is self._ids:
                for jid, _ in changes.stopped:
                    del by_id[jid]
                for v in changes.started:
                    by_id[v.id] = _fixed_one(v)
            else:
                by_id = self._by_id = {v.id: _fixed_one(v) for v in running}
            self._fixed = [by_id[v.id] for v in running]
            self._ids = ids
        return _stand(self._fixed, snapshot)

    def clear(self) -> None:
        self._ids, self._fixed, self._by_id = None, [], {}


_Fixed: TypeAlias = Literal[False] | tuple[float, float] | None
"""A running job's fixed part of `predictions_stand`: False, its claims never stand (an
overrun, or an owner's record); None, they stand wherever it has a prediction; (steps per
attained GPU-second, rate): its progress, where it reports any, is checked against these."""


def _fixed_one(v: JobView) -> _Fixed:
    if v.claim_overrun or v.claim_ratio != 1.0:
        return False
    intent = v.intent
    return _claim_bounds(intent.model, v.gpus) if intent is not None and intent.model else None


def _fixed(running: tuple[JobView, ...]) -> list[_Fixed]:
    return list(map(_fixed_one, running))


def _stand(fixed: list[_Fixed], snapshot: ClusterSnapshot) -> list[bool]:
    """The verdicts at the snapshot's time (`_believed`'s comparisons, in its order)."""
    out: list[bool] = []
    append = out.append
    for f, p, steps, attained in zip(fixed, snapshot.running_predicted, snapshot.running_steps,
                                     snapshot.running_attained, strict=True):
        if f is False or p is None:
            append(False)
        elif f is None or steps is None:
            append(True)
        else:
            rate = steps[1]
            append(not (steps[0] > f[0] * attained + 1 or (rate is not None and rate > f[1])))
    return out


@lru_cache(maxsize=4096)
def _claim_bounds(model: str, gpus: int) -> tuple[float, float] | None:
    """`_believed`'s two bounds for a job of `model` at `gpus` (the same floats): steps per
    attained GPU-second and rate; None where the model has no measured curve."""
    measured = _measured(model)
    if measured is None:
        return None
    return (PROFILE_SLACK * _peak_per_gpu(measured),
            PROFILE_SLACK * perfmodel.fastest(measured, max(gpus, 1)))


def claimed_remaining(job: JobView, now: float) -> Estimate | None:
    """The remaining run time the job's own believable claims state at its current GPU count,
    before the owner's record and any overrun are applied (None: it claims nothing
    believable). In order: the daemon's/simulator's prediction (made from progress); the job's
    own progress (steps left / rate); intent.total_steps at the profiled throughput."""
    g = max(job.gpus, 1)
    prog = believed_progress(job)
    # A prediction made from the job's progress stands or falls with that progress.
    if job.predicted_remaining_s is not None and (prog is not None or job.progress is None):
        return Estimate(seconds=max(0.0, job.predicted_remaining_s), gpus=g,
                        source=Source.PREDICTED)
    intent = job.intent
    total = (prog.steps_total if prog and prog.steps_total is not None
             else intent.total_steps if intent else None)
    done = prog.steps_done if prog else 0
    if total is not None and prog is not None and prog.rate and prog.rate > 0:
        return Estimate(seconds=max(0, total - done) / prog.rate, gpus=g, source=Source.PROGRESS)
    model = intent.model if intent else None
    if total is not None and model and model.lower() in perfmodel.curves():
        rate = _throughput(model, intent.batch_size if intent else None, g)
        if rate > 0:
            return Estimate(seconds=max(0, total - done) / rate, gpus=g, source=Source.PROFILE)
    return None


def estimate_remaining(job: JobView, now: float, *, time_limit: bool = True) -> Estimate | None:
    """What a policy can know about a job's remaining run time at its current GPU count.

    A running job that overran its claims: about as long again as it has run. Otherwise its
    believable claim (`claimed_remaining`) stretched by its owner's record, unless that record
    says its claims are not believed. Then, when `time_limit`, the Slurm time limit as an upper
    bound (remaining limit if running). Never a true duration (JobView has none).
    """
    g = max(job.gpus, 1)
    running = job.state.is_running and job.start_time is not None
    elapsed = now - job.start_time if running and job.start_time is not None else 0.0
    left = (max(0.0, job.time_limit_s - elapsed) if time_limit and job.time_limit_s is not None
            else math.inf)
    if job.claim_overrun and running:
        return Estimate(seconds=min(max(0.0, elapsed), left), gpus=g, source=Source.OBSERVED)
    ratio = job.claim_ratio
    if ratio < math.inf:
        claim = claimed_remaining(job, now)
        if claim is not None:
            if ratio == 1.0:
                return claim
            return Estimate(seconds=claim.seconds * ratio, gpus=g, source=claim.source,
                            ratio=ratio)
    if left < math.inf:
        return Estimate(seconds=left, gpus=g, source=Source.TIME_LIMIT)
    return None


def claimed_run_s(job: JobView) -> float | None:
    """The whole run time the job's intent claims at its current GPU count (its steps at the
    profiled throughput), None when it claims none: what the daemon holds a finished job to."""
    intent = job.intent
    if intent is None or intent.total_steps is None or not intent.model:
        return None
    if intent.model.lower() not in perfmodel.curves():
        return None
    rate = _throughput(intent.model, intent.batch_size, max(job.gpus, 1))
    return intent.total_steps / rate if rate > 0 else None


def remaining_at(job: JobView, est: Estimate, gpus: int) -> float:
    """The estimate moved to another GPU count along the job's speed-up curve."""
    if gpus == est.gpus or est.seconds == 0:
        return est.seconds
    model = job.intent.model if job.intent else None
    batch = job.intent.batch_size if job.intent else None
    factor = _scaled(est.gpus, gpus, model, batch)
    return est.seconds / factor if factor > 0 else math.inf


def remaining_memo(job: JobView, est: Estimate | None, memo: dict[int, float],
                   gpus: int) -> float:
    """`remaining_at(job, est, gpus)` kept in `memo` (by GPU count); inf when `est` is None."""
    r = memo.get(gpus)
    if r is None:
        r = memo[gpus] = remaining_at(job, est, gpus) if est is not None else math.inf
    return r


# The measured curves never change (perfmodel.curves is loaded once), so their answers may be
# kept: looking a curve up costs more than the rest of an estimate.

@lru_cache(maxsize=4096)
def _throughput(model: str, batch_size: int | None, gpus: int) -> float:
    return perfmodel.curve_for(model, batch_size).throughput(gpus)


@lru_cache(maxsize=4096)
def _scaled(from_gpus: int, to_gpus: int, model: str | None, batch_size: int | None) -> float:
    return perfmodel.scaled_rate(1.0, from_gpus, to_gpus, model, batch_size)


@lru_cache(maxsize=256)
def _peak_per_gpu(model: str) -> float:
    """The most iterations per second per GPU any measured curve of `model` reaches."""
    return max(max(c.throughput(g) / g for g in c.gpus) for c in perfmodel.curves()[model])


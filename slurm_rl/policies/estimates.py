"""What a policy can know about a job's remaining run time (never the true duration: that
reaches only oracle policies, through `capabilities.Oracle`), and that time at another GPU count.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import lru_cache

from slurm_rl import perfmodel
from slurm_rl.core import JobView


class Source(enum.Enum):
    """Where a remaining-time estimate came from (named in reasons)."""

    PREDICTED = "predicted"
    PROGRESS = "progress"
    PROFILE = "steps at profiled throughput"
    TIME_LIMIT = "time limit"
    HISTORY = "history"
    DEFAULT = "default"


@dataclass(frozen=True, kw_only=True)
class Estimate:
    seconds: float
    """Remaining run time at `gpus`."""
    gpus: int
    source: Source


def estimate_remaining(job: JobView, now: float, *, time_limit: bool = True) -> Estimate | None:
    """What a policy can know about a job's remaining run time at its current GPU count.

    In order: the daemon's/simulator's prediction; the job's own progress (steps left / rate);
    intent.total_steps at the profiled throughput for its model; the Slurm time limit as an upper
    bound (remaining limit if running). Never a true duration (JobView has none).
    """
    g = max(job.gpus, 1)
    if job.predicted_remaining_s is not None:
        return Estimate(seconds=max(0.0, job.predicted_remaining_s), gpus=g,
                        source=Source.PREDICTED)
    intent, prog = job.intent, job.progress
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
    if time_limit and job.time_limit_s is not None:
        elapsed = (now - job.start_time if job.state.is_running and job.start_time is not None
                   else 0.0)
        return Estimate(seconds=max(0.0, job.time_limit_s - elapsed), gpus=g,
                        source=Source.TIME_LIMIT)
    return None


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

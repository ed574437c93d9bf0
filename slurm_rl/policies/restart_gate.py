"""Whether restarting a running job at another GPU count pays: the rule the daemon applies to
a policy's resizes before it acts (daemon/resize.py) and the simulator with
`EngineConfig.restart_rules`, so that both weigh a resize alike. Pure: from the job's view
(its own progress or the prediction the policy sees, never a true duration).
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_rl.core import JobView
from slurm_rl.policies.estimates import estimate_remaining, remaining_at

HOUR_S = 3600.0
"""The window of the per-job restart cap ([resize] max_per_hour)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Gain:
    """`seconds`: predicted run time saved (a grow) or left beyond the cost (a shrink); `why`:
    empty when the restart pays, else the one-line reason it does not."""

    seconds: float = 0.0
    why: str = ""


def restart_gain(job: JobView, gpus: int, *, now: float, cost_s: float) -> Gain:
    """A grow must save more predicted run time than a restart costs (`cost_s`); a shrink is
    not made on a job predicted to finish within that cost anyway."""
    est = estimate_remaining(job, now)
    if est is None:
        return Gain(why="no prediction of its remaining time")
    if gpus > job.gpus:
        gain = est.seconds - remaining_at(job, est, gpus)
        if gain <= cost_s:
            return Gain(seconds=gain, why=f"predicted gain {gain:.0f}s does not beat the "
                        f"restart cost {cost_s:.0f}s")
        return Gain(seconds=gain)
    gain = est.seconds - cost_s
    if gain <= 0:
        return Gain(seconds=gain, why=f"finishes within the restart cost ({est.seconds:.0f}s "
                    "left)")
    return Gain(seconds=gain)

"""The daemon's remaining-time prediction from a job's progress reports (pure, no Slurm).

A job reports `{rlp:done/total@rate;t=when}` in its comment (slurm_rl/progress.py); the daemon
sees the latest report at each poll. The rate is fitted online over the reports of the current
run: steps between the first report seen in the run and the latest, over the time between them
(with independent per-interval noise in the step rate this is the maximum-likelihood mean rate;
it needs only two points, so polls that miss reports lose nothing). Until a run has two reports,
the job's own rate (measured by `slurm-rl progress` over one interval) stands in. The remaining
time counts from `now`: the time since the latest report is taken off.

A new run (another start time, or fewer steps than before: restarted from a checkpoint) starts a
new fit; the previous run's rate is kept and moved to the new GPU count along the model's
throughput curve (`perfmodel.scaled_rate`) until the new run has its own, so a job resized from
4 to 8 GPUs is predicted at 8 before its first report there. benchmarks/bench_prediction.py
measures the error (docs/daemon.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_rl import perfmodel
from slurm_rl.core import Intent, Progress


@dataclass(frozen=True, slots=True)
class RateFit:
    """The reports of one run that the fit needs, and the last run's rate at its count."""

    run_start: float | None
    gpus: int
    first_t: float
    first_steps: int
    last_t: float
    last_steps: int
    reported_rate: float | None
    """The latest report's own rate (used while the run has a single report)."""
    points: int = 1
    """Reports of this run seen (0: the comment still shows a report from before the run)."""
    prior_rate: float | None = None
    """The previous run's fitted rate, at `prior_gpus`."""
    prior_gpus: int = 0

    @property
    def rate(self) -> float | None:
        """Steps per second at `gpus`, fitted over this run's reports."""
        if self.points == 0:
            return None
        if self.last_t > self.first_t and self.last_steps > self.first_steps:
            return (self.last_steps - self.first_steps) / (self.last_t - self.first_t)
        if self.reported_rate is not None and self.reported_rate > 0:
            return self.reported_rate
        return None


def update(fit: RateFit | None, progress: Progress, run_start: float, gpus: int
           ) -> RateFit | None:
    """`fit` with the report `progress` of a running job whose run started at `run_start` on
    `gpus` GPUs. A report without a time is not a point (None: nothing to fit)."""
    t = progress.updated_at
    if t is None:
        return fit
    steps = progress.steps_done
    points = 0 if t < run_start else 1
    if (fit is not None and fit.run_start == run_start and fit.gpus == gpus
            and steps >= fit.last_steps and t >= fit.last_t and fit.points):
        if t == fit.last_t:
            return fit
        return RateFit(run_start=run_start, gpus=gpus, first_t=fit.first_t,
                       first_steps=fit.first_steps, last_t=t, last_steps=steps,
                       reported_rate=progress.rate, prior_rate=fit.prior_rate,
                       prior_gpus=fit.prior_gpus)
    prior_rate, prior_gpus = None, 0
    if fit is not None:  # a new run: keep what the last one measured
        prior_rate, prior_gpus = (fit.rate, fit.gpus) if fit.rate else (
            fit.prior_rate, fit.prior_gpus)
    if fit is not None and fit.run_start == run_start and fit.gpus == gpus and not points:
        return fit  # still no report of this run
    return RateFit(run_start=run_start, gpus=gpus, first_t=t, first_steps=steps, last_t=t,
                   last_steps=steps, reported_rate=progress.rate, prior_rate=prior_rate,
                   prior_gpus=prior_gpus, points=points)


def rate_at(fit: RateFit, gpus: int, intent: Intent | None) -> float | None:
    """The fitted rate moved to `gpus` along the model's curve (this run's if it has one, else
    the previous run's)."""
    rate, at = fit.rate, fit.gpus
    if rate is None:
        rate, at = fit.prior_rate, fit.prior_gpus
    if not rate or rate <= 0:
        return None
    if at == gpus or at <= 0 or gpus <= 0:
        return rate
    model = intent.model if intent else None
    batch = intent.batch_size if intent else None
    return perfmodel.scaled_rate(rate, at, gpus, model, batch)


def remaining(fit: RateFit | None, progress: Progress | None, *, now: float, gpus: int,
              run_start: float | None, intent: Intent | None = None) -> float | None:
    """Seconds left at `gpus` from `now` (None: no rate or no total to go by); `run_start`:
    when the current run started (None: not running). A running job has progressed since its
    latest report (or since its run started, when the report is older)."""
    if progress is None or progress.steps_total is None:
        return None
    rate = rate_at(fit, gpus, intent) if fit is not None else None
    if rate is None:
        rate = progress.rate if progress.rate and progress.rate > 0 else None
    if rate is None:
        return None
    # The reports' times are the job's word: two dated a second apart with a large step
    # between them would fit any rate. No faster than its model could be believed to run.
    ceiling = perfmodel.rate_ceiling(intent.model if intent else None, gpus)
    if ceiling is not None and rate > ceiling:
        rate = ceiling
    left = max(0, progress.steps_total - progress.steps_done) / rate
    if run_start is not None:
        since = max(run_start, progress.updated_at or run_start)
        if now > since:
            left -= now - since
    return max(0.0, left)

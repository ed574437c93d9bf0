"""The daemon's remaining-time prediction from progress reports (slurm_rl/slurm/predict.py)."""

from __future__ import annotations

import pytest

from slurm_rl import perfmodel
from slurm_rl.core import Intent, Progress
from slurm_rl.slurm import predict


def report(steps: int, t: float, rate: float | None = None, total: int = 10_000) -> Progress:
    return Progress(steps_done=steps, steps_total=total, rate=rate, updated_at=t)


def test_the_rate_is_fitted_over_the_run_not_the_last_interval() -> None:
    fit = predict.update(None, report(100, 1030.0, rate=3.0), 1000.0, 4)
    assert fit is not None and fit.rate == 3.0  # one report: its own rate stands in
    fit = predict.update(fit, report(1100, 1530.0, rate=2.0), 1000.0, 4)
    fit = predict.update(fit, report(2600, 2030.0, rate=3.5), 1000.0, 4)
    assert fit is not None and fit.rate == pytest.approx(2500 / 1000)  # not the last 3.5
    # A poll that sees the same report again changes nothing.
    assert predict.update(fit, report(2600, 2030.0, rate=3.5), 1000.0, 4) == fit
    left = predict.remaining(fit, report(2600, 2030.0, rate=3.5), now=2130.0, gpus=4,
                             run_start=1000.0)
    assert left == pytest.approx(7400 / 2.5 - 100)  # time since the report taken off


def test_a_pending_job_is_not_aged_and_without_total_or_rate_there_is_none() -> None:
    assert predict.remaining(None, report(0, 5.0, rate=2.0, total=100), now=1e9, gpus=1,
                             run_start=None) == 50.0
    assert predict.remaining(None, report(10, 5.0), now=9.0, gpus=1, run_start=0.0) is None
    assert predict.remaining(None, Progress(steps_done=3), now=9.0, gpus=1, run_start=0.0) is None
    assert predict.remaining(None, None, now=9.0, gpus=1, run_start=0.0) is None


def test_a_resized_job_is_predicted_at_its_new_count_along_the_curve() -> None:
    intent = Intent(model="resnet50")
    fit = predict.update(None, report(0, 100.0), 90.0, 4)
    fit = predict.update(fit, report(4000, 500.0), 90.0, 4)
    assert fit is not None and fit.rate == 10.0
    # Requeued and restarted on 8 GPUs: the comment still shows the old run's last report.
    fit = predict.update(fit, report(4000, 500.0), 800.0, 8)
    assert fit is not None and fit.points == 0 and fit.rate is None
    at8 = perfmodel.scaled_rate(10.0, 4, 8, "resnet50", None)
    assert predict.rate_at(fit, 8, intent) == pytest.approx(at8)
    left = predict.remaining(fit, report(4000, 500.0), now=850.0, gpus=8, run_start=800.0,
                             intent=intent)
    assert left == pytest.approx(6000 / at8 - 50)  # counted from the run's start
    # Its first report there starts the new run's own fit.
    fit = predict.update(fit, report(4200, 830.0, rate=11.0), 800.0, 8)
    assert fit is not None and fit.points == 1 and fit.rate == 11.0


def test_restarting_from_a_checkpoint_starts_a_new_fit() -> None:
    fit = predict.update(None, report(0, 100.0), 0.0, 2)
    fit = predict.update(fit, report(1000, 200.0), 0.0, 2)
    fit = predict.update(fit, report(600, 300.0, rate=5.0), 250.0, 2)  # fewer steps
    assert fit is not None and (fit.first_steps, fit.rate, fit.prior_rate) == (600, 5.0, 10.0)

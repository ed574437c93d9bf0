"""benchmarks/calibrate_restart.py: the parser of the checkpointing job's log, one restart's
figures from it, the model file it writes (read back by the simulator's reader), and one
calibration on the real test cluster."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.calibrate_restart import (  # noqa: E402
    STEPS,
    LogEvent,
    Restart,
    main,
    measure,
    model_toml,
    parse_log,
)
from slurm_rl.sim.restart_model import RestartModel, read_restart_model  # noqa: E402

# Recorded from examples/checkpoint_job.py on the test cluster (one restart; times shortened).
LOG = """\
start t=100.000000
fresh t=100.050000
step=1 t=100.150000
step=2 t=100.250000
checkpoint step=2 began=100.260000 t=100.300000
step=3 t=100.400000
step=4 t=100.500000
term step=4 t=101.310000
slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2026-12-04T21:59:39 DUE TO JOB REQUEUE ***
start t=102.500000
restored step=2 t=102.600000
step=3 t=102.700000
step=4 t=102.800000
step=5
"""


def test_the_job_log_parses_and_other_lines_are_skipped() -> None:
    events = parse_log(LOG)
    assert [e.event for e in events] == ["start", "fresh", "step", "step", "checkpoint",
                                         "step", "step", "term", "start", "restored", "step",
                                         "step"]
    assert events[4] == LogEvent(event="checkpoint", t=100.3, step=2)
    assert events[-1] == LogEvent(event="step", t=102.8, step=4)  # ("step=5": cut)


def test_one_restart_from_the_log_and_the_driver_s_times() -> None:
    r = measure(parse_log(LOG), signal_at=100.26, requeue_at=101.26, pending_at=101.4,
                release_at=101.45, running_at=102.4, step_s=0.1)
    assert r.checkpoint == pytest.approx(0.04) and r.grace == pytest.approx(1.0)
    assert r.requeue == pytest.approx(0.14) and r.relaunch == pytest.approx(0.95)
    assert r.restore == pytest.approx(0.2)  # from RUNNING seen (102.4), before `start`
    assert (r.lost_steps, r.lost) == (2, pytest.approx(0.2))  # steps 3 and 4 again


def test_a_restore_from_another_step_than_the_checkpoint_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="restored step 2, but the checkpoint held 3"):
        measure(parse_log(LOG.replace("checkpoint step=2", "checkpoint step=3")),
                signal_at=100.26, requeue_at=101.26, pending_at=101.4, release_at=101.45,
                running_at=102.4, step_s=0.1)


def test_the_model_file_is_what_the_simulator_reads(tmp_path: Path) -> None:
    runs = [Restart(checkpoint=0.1, grace=10.0, requeue=0.1 * i, relaunch=0.8, restore=0.05 * i,
                    lost=9.9, lost_steps=99) for i in (1, 2, 3)]
    path = tmp_path / "m.toml"
    path.write_text(model_toml(runs, size_mb=1, command="calibrate_restart.py -n 3"))
    assert read_restart_model(path) == RestartModel(grace_s=10.0, requeue_s=1.0,
                                                    restore_s=0.1)


@pytest.mark.slurm
def test_one_calibration_on_the_cluster_measures_every_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "restart.toml"
    t0 = time.monotonic()
    assert main(["-n", "1", "--size-mb", "1", "--grace-s", "1", "--run-s", "0.5",
                 "--out", str(out)]) == 0
    assert time.monotonic() - t0 < 60
    printed = capsys.readouterr().out
    for step in STEPS:
        line = next(x for x in printed.splitlines() if x.startswith(step + " "))
        median, low, high = (float(v) for v in line.split()[1:])
        assert 0 < low <= median <= high, line
    model = read_restart_model(out)
    assert model.grace_s is not None and model.grace_s >= 1.0
    assert model.requeue_s is not None and model.requeue_s > 0
    assert model.restore_s is not None and model.restore_s > 0

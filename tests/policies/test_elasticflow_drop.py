"""`elasticflow`'s `declined` option: best-effort (the default) or drop, as the original drops a
job that fails admission (pkusys/ElasticFlow, scheduler.py: ef_sim_jobs_access_control,
`JOBS.move_to_declined`); the drop form is also registered as `elasticflow-drop`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from policy_builders import NOW, ids, job, nodes, order_of, snap

from slurm_rl.cli import main
from slurm_rl.core import Intent
from slurm_rl.policies import elasticflow, make
from slurm_rl.policies.capabilities import Dropping
from slurm_rl.sim import metrics
from slurm_rl.sim.config import EngineConfig, TimeLimitEstimate
from slurm_rl.sim.engine import Simulator
from slurm_rl.sim.trace import TraceJob

EXACT = TimeLimitEstimate(factor=1.0, round_up_s=0.0, min_s=0.0)


def dl(seconds: float) -> Intent:
    return Intent(deadline=NOW + seconds)


def _snapshot() -> object:
    # One idle node of 8 GPUs. A (2 GPUs, 1000 s) is admitted; C (2 GPUs, 1000 s, deadline in
    # 500 s) cannot make it even with the whole cluster: declined. Best-effort, C starts at
    # its count in the room A's plan leaves; dropped, it does not.
    return snap(job("A", gpus=2, intent=dl(2000), predicted_remaining_s=1000, submit=1),
                job("C", gpus=2, intent=dl(500), predicted_remaining_s=1000, submit=2),
                job("Z", gpus=2, submit=3, predicted_remaining_s=100),
                nodes=nodes(0, total=8))


def test_best_effort_runs_a_declined_job_drop_does_not() -> None:
    s = _snapshot()
    kept = elasticflow.new()
    d = kept.decide(s)  # type: ignore[arg-type]
    assert "start now" in order_of(d, "C").reason and kept.take_dropped() == ()
    assert kept.name == "elasticflow"

    dropping = elasticflow.new(declined="drop")
    assert dropping.name == "elasticflow-drop" and isinstance(dropping, Dropping)
    d = dropping.decide(s)  # type: ignore[arg-type]
    c = order_of(d, "C")
    assert c.reason.startswith("declined at admission") and "dropped" in c.reason
    assert "start now" not in c.reason
    assert ids(d)[-1] == "C", "a dropped job is ranked last (after the job without deadline)"
    assert dropping.declined_jobs == 1
    assert dropping.take_dropped() == ("C",)
    assert dropping.take_dropped() == (), "taken once"
    dropping.decide(s)  # type: ignore[arg-type]
    assert dropping.take_dropped() == (), "a verdict is sticky: C is not declined again"


def test_the_registered_drop_form() -> None:
    p = make("elasticflow-drop")
    assert p.name == "elasticflow-drop"
    assert p == elasticflow.new(declined="drop")


@pytest.mark.parametrize("bad", ["nope", "", 1, None, "Drop"])
def test_a_bad_declined_value_is_one_clear_error(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^declined must be one of 'best-effort', 'drop', "
                                         r"got .*$"):
        elasticflow.new(declined=bad)


def test_the_drop_form_takes_no_declined_option() -> None:
    with pytest.raises(ValueError, match="takes no 'declined' option"):
        make("elasticflow-drop", declined="best-effort")


def test_simulate_refuses_a_bad_value_in_one_line() -> None:
    r = CliRunner().invoke(main, [
        "simulate", "--trace", "data:itp-deadline-cluster02.csv", "--format", "itp-deadline",
        "--nodes", "1", "--policy", "elasticflow", "--policy-option", "declined=sometimes"])
    assert r.exit_code == 2 and r.exception is not None
    assert "Traceback" not in r.output
    assert [ln for ln in r.output.splitlines()
            if "--policy-option" in ln and "declined must be one of 'best-effort', 'drop', "
            "got 'sometimes'" in ln]


def _trace() -> list[TraceJob]:
    # One node of 4 GPUs. A holds it all until 1000; B (deadline 600, 500 s on 2 GPUs) cannot
    # start before 1000: declined at its arrival; C makes its deadline after A.
    return [TraceJob(id="A", submit=0.0, duration=1000.0, gpus=4, deadline=3000.0),
            TraceJob(id="B", submit=10.0, duration=500.0, gpus=2, deadline=600.0),
            TraceJob(id="C", submit=20.0, duration=100.0, gpus=2, deadline=5000.0)]


def _run(policy: object) -> object:
    cfg = EngineConfig(nodes=1, gpus_per_node=4, audit=True, time_limit=EXACT)
    return Simulator(_trace(), policy, cfg).run()  # type: ignore[arg-type]


def test_in_the_simulator_a_dropped_job_never_runs_and_is_a_miss() -> None:
    kept = _run(elasticflow.new())
    assert [j.job_id for j in kept.jobs] == ["A", "B", "C"]  # type: ignore[attr-defined]
    assert kept.declined_dropped == ()  # type: ignore[attr-defined]

    result = _run(elasticflow.new(declined="drop"))
    assert [j.job_id for j in result.jobs] == ["A", "C"]  # type: ignore[attr-defined]
    assert "B" not in {iv.job_id for iv in result.intervals}  # type: ignore[attr-defined]
    (b,) = result.declined_dropped  # type: ignore[attr-defined]
    assert (b.job_id, b.at, b.deadline) == ("B", 10.0, 600.0)
    s = metrics.summary(result)  # type: ignore[arg-type]
    assert s["declined_dropped_jobs"] == 1 and s["jobs"] == 2 and s["dropped_jobs"] == 0
    assert s["deadline_hit_rate"] == pytest.approx(2 / 3), "B counts as a missed deadline"
    assert metrics.deadline_hit_rate(result.jobs) == 1.0  # type: ignore[attr-defined]
    assert not result.notes  # type: ignore[attr-defined]

"""The preempting form of the `rl` policy (`preempt_margin`, policies/rl/preempting.py): on by
default; when on, it requeues exactly the running jobs the network scores below a pending job
by more than the margin (through the preemption planner), except those its guards protect;
`running_rows` shows a running job's remaining time-limit estimate; a bad margin is one clear
error."""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from slurm_rl import policies  # noqa: E402
from slurm_rl.core import (  # noqa: E402
    ClusterSnapshot,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Progress,
)
from slurm_rl.policies.capabilities import CycleState, Gated, OracleReading, Preempting  # noqa: E402
from slurm_rl.policies.rl import default_checkpoint  # noqa: E402
from slurm_rl.policies.rl.features import (  # noqa: E402
    JOB_FEATURES,
    FeatureConfig,
    RowCache,
    features,
    running_rows,
)
from slurm_rl.policies.rl.preempting import RLPreempting  # noqa: E402
from slurm_rl.rl import model as rl_model  # noqa: E402

NOW = 1000.0


def _snap(arrived: bool = True) -> ClusterSnapshot:
    """Two full 4-GPU nodes, each running one 4-GPU job (one long, one short); a 4-GPU job
    pending (arrived now, or earlier)."""
    run = tuple(JobView(id=JobId(f"r{i}"), state=JobState.RUNNING, submit_time=0.0,
                        start_time=100.0, gpus=4, time_limit_s=limit,
                        attained_gpu_s=4 * (NOW - 100.0), placement=((NodeName(f"n{i}"), 4),))
                for i, limit in enumerate((100_000.0, 2_000.0)))
    pend = JobView(id=JobId("p"), state=JobState.PENDING, submit_time=NOW if arrived else 500.0,
                   gpus=4, time_limit_s=600.0)
    nodes = tuple(NodeView(name=NodeName(f"n{i}"), state=NodeState.ALLOCATED, gpus_total=4,
                           gpus_alloc=4) for i in range(2))
    return ClusterSnapshot(time=NOW, jobs=(*run, pend), nodes=nodes)


def test_default_is_preemptive_and_guarded_and_none_is_order_only() -> None:
    from slurm_rl.policies.guard import Guarded

    guarded = policies.make("rl")
    assert isinstance(guarded, Guarded) and isinstance(guarded.primary, RLPreempting)
    assert guarded == policies.make("rl", guard="on", preempt_margin=0.0)
    p = policies.make("rl", guard="off")
    assert isinstance(p, RLPreempting) and p.preempt_margin == 0.0
    assert isinstance(p, Preempting) and not isinstance(p, OracleReading)
    assert p == policies.make("rl", guard="off", preempt_margin=0.0)
    assert not isinstance(policies.make("rl", guard="off", preempt_margin="none"), Preempting)
    assert not isinstance(policies.make("rl", guard="off", preempt_margin=None), Preempting)


@pytest.mark.parametrize("bad", ["x", -1.0, float("nan")])
def test_bad_margin_is_one_clear_error(bad: object) -> None:
    with pytest.raises(ValueError, match="preempt_margin"):
        policies.make("rl", guard="off", preempt_margin=bad)


def test_running_rows_show_the_remaining_time_limit() -> None:
    s = _snap()
    cache = RowCache()
    rows = running_rows(s, s.running, cache=cache)
    est = JOB_FEATURES.index("est_remaining")
    work = JOB_FEATURES.index("est_work")
    for row, limit in zip(rows, (100_000.0, 2_000.0), strict=True):
        left = limit - (NOW - 100.0)
        assert row[est] == pytest.approx(math.log1p(left / 60) / 10, rel=1e-6)
        assert row[work] == pytest.approx(math.log1p(4 * left / 60) / 10, rel=1e-6)
        assert row[JOB_FEATURES.index("fits_now")] == 1.0
    again = running_rows(s, s.running, cache=cache)  # (the second call reads the cache)
    assert (again == rows).all()
    # progress reported later in the same run shows (it is not taken from the cache)
    r0 = dataclasses.replace(s.running[0], progress=Progress(steps_done=30, steps_total=120,
                                                             rate=0.1))
    row = running_rows(s, [r0], cache=cache)[0]
    assert row[JOB_FEATURES.index("progress")] == pytest.approx(0.25)
    assert row[JOB_FEATURES.index("has_progress")] == 1.0
    assert row[est] == pytest.approx(math.log1p(900 / 60) / 10, rel=1e-6)  # 90 steps / 0.1


def test_preempts_what_the_network_scores_below_the_pending_job() -> None:
    policy = policies.make("rl", guard="off", preempt_margin=0.0)
    assert isinstance(policy, RLPreempting)
    s = _snap()
    net, _ = rl_model.load(default_checkpoint())  # torch's own forward, not the policy's
    f = features(s, FeatureConfig(max_jobs=net.cfg.max_jobs))
    with torch.no_grad():
        sp = float(net.scores(torch.from_numpy(f.job_feats[:1]),
                              torch.from_numpy(f.cluster_feats))[0])
        sr = net.scores(torch.from_numpy(running_rows(s, s.running)),
                        torch.from_numpy(f.cluster_feats)).tolist()
    d = policy.decide(s)
    below = sorted((sc, j.id) for sc, j in zip(sr, s.running, strict=True) if sc < sp)
    # one 4-GPU job must go for p to fit: the lowest-scored one, if any is below p
    assert [x.job_id for x in d.preemptions] == ([below[0][1]] if below else [])
    # the shipped network ranks the 600 s job above the one with ~27 h left
    assert [x.job_id for x in d.preemptions] == [JobId("r0")]
    assert [o.job_id for o in d.order] == [JobId("p")]
    assert not policies.make("rl", guard="off", preempt_margin=100.0).decide(s).preemptions


def test_no_arrival_and_nothing_fits_is_futile_but_decide_still_orders() -> None:
    """The simulator skips such a call (`Gated.futile`: no job fits and none arrived); the
    daemon, which asks at every cycle, still gets the whole order and the requeues (the
    same as when the job had just arrived: the network scores the long run below it)."""
    policy = policies.make("rl", guard="off", preempt_margin=0.0)
    assert isinstance(policy, Gated)
    s = _snap(arrived=False)
    assert policy.futile(s, CycleState())
    d = policy.decide(s)
    assert [o.job_id for o in d.order] == [JobId("p")]
    assert [x.job_id for x in d.preemptions] == [JobId("r0")]
    assert not policy.futile(_snap(arrived=True), CycleState())


def test_a_run_of_protect_run_s_is_not_requeued() -> None:
    """The utilisation guard (default 6 h): the long job that is requeued when it has run 15
    minutes is left to finish once its current run has lasted longer than protect_run_s."""
    s = _snap()
    long_run = dataclasses.replace(s.running[0], start_time=NOW - 7 * 3600.0,
                                   attained_gpu_s=4 * 7 * 3600.0)
    s7 = dataclasses.replace(s, jobs=(long_run, *s.jobs[1:]))
    assert JobId("r0") in {p.job_id for p in
                           policies.make("rl", guard="off", preempt_margin=0.0,
                                         protect_run_s="none").decide(s7).preemptions}
    guarded = policies.make("rl", guard="off", preempt_margin=0.0)
    assert isinstance(guarded, RLPreempting) and guarded.protect_run_s == 6 * 3600.0
    assert JobId("r0") not in {p.job_id for p in guarded.decide(s7).preemptions}
    assert JobId("r0") not in {p.job_id for p in policies.make(
        "rl", preempt_margin=0.0, protect_run_s=None, max_restarts=0).decide(s7).preemptions}

"""policies/rl/features.py: the observation and the action -> Decision path shared by the env
and the live `rl` policy (plain ClusterSnapshots, as the daemon builds them)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from slurm_rl.core import (
    ClusterSnapshot,
    Intent,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Progress,
    ServiceClass,
)
from slurm_rl.policies.rl.action import decision_from_scores, gpus_from_choice
from slurm_rl.policies.rl.features import (
    CLUSTER_FEATURES,
    JOB_FEATURES,
    N_CLUSTER_FEATURES,
    N_JOB_FEATURES,
    FeatureConfig,
    features,
)

COL = {name: i for i, name in enumerate(JOB_FEATURES)}


def pending(i: int, submit: float, gpus: int = 1, **kw: object) -> JobView:
    return JobView(id=JobId(str(i)), state=JobState.PENDING, submit_time=submit, gpus=gpus,
                   **kw)  # type: ignore[arg-type]


def node(i: int, alloc: int, total: int = 4) -> NodeView:
    return NodeView(name=NodeName(f"node{i}"), state=NodeState.MIXED, gpus_total=total,
                    gpus_alloc=alloc)


def snap(jobs: tuple[JobView, ...], nodes: tuple[NodeView, ...] = (), t: float = 1000.0
         ) -> ClusterSnapshot:
    return ClusterSnapshot(time=t, jobs=jobs, nodes=nodes or (node(1, 2), node(2, 4)))


def ids(*names: str) -> tuple[JobId, ...]:
    return tuple(JobId(n) for n in names)


RANGED = Intent(gpus_min=3, gpus_max=8)


def test_shapes_mask_and_values() -> None:
    jobs = (
        pending(1, 0.0, 2, intent=Intent(deadline=4600.0, hard=True,
                                         service_class=ServiceClass.CRITICAL), restarts=1,
                attained_gpu_s=7200.0, time_limit_s=3600.0,
                progress=Progress(steps_done=25, steps_total=100)),
        pending(2, 400.0, 4, intent=RANGED),
        JobView(id=JobId("3"), state=JobState.RUNNING, submit_time=0.0, gpus=4, start_time=1.0),
    )
    f = features(snap(jobs), FeatureConfig(max_jobs=4))
    assert f.job_feats.shape == (4, N_JOB_FEATURES) and f.job_feats.dtype == np.float32
    assert f.cluster_feats.shape == (N_CLUSTER_FEATURES,)
    assert f.mask.tolist() == [1, 1, 0, 0] and f.shown_ids == ("1", "2")
    a, b = f.job_feats[0], f.job_feats[1]
    assert not f.job_feats[2:].any()
    assert a[COL["progress"]] == pytest.approx(0.25) and a[COL["has_progress"]] == 1
    assert a[COL["critical"]] == 1 and a[COL["hard"]] == 1 and a[COL["slack"]] > 0
    assert a[COL["attained_run"]] == pytest.approx(np.log1p(3600 / 60) / 10)
    assert a[COL["fits_now"]] == 1  # 2 GPUs free on node1
    assert b[COL["has_range"]] == 1 and b[COL["gpus_min"]] == pytest.approx(np.log2(3) / 6)
    assert b[COL["gpus_max"]] == pytest.approx(np.log2(8) / 6)
    assert b[COL["fits_now"]] == 0 and a[COL["wait"]] > b[COL["wait"]]
    c = dict(zip(CLUSTER_FEATURES, f.cluster_feats.tolist(), strict=True))
    assert c["free_share"] == pytest.approx(2 / 8) and c["nodes_free_2"] == 0.5
    assert c["nodes_free_0"] == 0.5 and c["max_free_node"] == pytest.approx(2 / 8)


def test_features_are_deterministic_and_independent_of_job_order() -> None:
    jobs = tuple(pending(i, float(i % 7), 1 + i % 3, attained_gpu_s=float(i)) for i in range(50))
    f1 = features(snap(jobs), FeatureConfig(max_jobs=16))
    f2 = features(snap(jobs[::-1]), FeatureConfig(max_jobs=16))
    assert f1.shown_ids == f2.shown_ids
    for x, y in ((f1.job_feats, f2.job_feats), (f1.cluster_feats, f2.cluster_feats),
                 (f1.mask, f2.mask)):
        assert x.tobytes() == y.tobytes()


def test_the_oldest_are_shown_the_rest_rank_after_in_submit_order() -> None:
    jobs = tuple(pending(i, float(100 - i)) for i in range(1, 11))  # job 10 is the oldest
    s = snap(jobs)
    f = features(s, FeatureConfig(max_jobs=3))
    assert f.shown_ids == ("10", "9", "8")
    d = decision_from_scores(s, f.shown_ids, [0.1, 0.9, 0.5])
    assert [o.job_id for o in d.order] == ["9", "8", "10", "7", "6", "5", "4", "3", "2", "1"]
    assert [o.rank for o in d.order] == list(range(10))
    assert d.policy == "rl" and "shown" in d.order[5].reason


def test_ranking_ties_nan_and_slots_beyond_the_shown() -> None:
    s = snap(tuple(pending(i, float(i)) for i in range(1, 5)))
    d = decision_from_scores(s, ids("1", "2", "3", "4"), [0.5, np.nan, 0.5, 0.7, 9.0, 9.0])
    assert [o.job_id for o in d.order] == ["4", "1", "3", "2"]
    with pytest.raises(ValueError, match="scores"):
        decision_from_scores(s, ids("1", "2"), [1.0])


def test_gpu_counts_stay_in_the_range_and_only_for_range_jobs() -> None:
    jobs = (pending(1, 0.0, 4, intent=RANGED), pending(2, 1.0, 4),
            pending(3, 2.0, 2, intent=Intent(gpus_min=1, gpus_max=64)))
    s = snap(jobs)  # 8 usable GPUs: job 3's range is capped at 8
    for choice, want in (([0.0, 1.0, 1.0], [3, None, 8]), ([1.0, 0.0, 0.0], [8, None, 1]),
                         ([0.5, 0.5, 0.5], [6, None, 5]), ([-3.0, 2.0, np.nan], [3, None, 1])):
        d = decision_from_scores(s, ids("1", "2", "3"), [3.0, 2.0, 1.0], choice)
        assert [o.gpus for o in d.order] == want
    d = decision_from_scores(s, ids("1", "2", "3"), [3.0, 2.0, 1.0], None)
    assert all(o.gpus is None for o in d.order)
    assert gpus_from_choice((1, 4), 0.34) == 2


def test_no_field_beyond_a_plain_jobview_is_needed() -> None:
    """Features come from JobView's own fields: a job with every field at its default works,
    and a JobView carries no true duration to read."""
    names = {f.name for f in dataclasses.fields(JobView)}
    assert not any("oracle" in n or "duration" in n for n in names)
    f = features(snap((pending(1, 0.0),)), FeatureConfig(max_jobs=2))
    assert f.mask.tolist() == [1, 0]


def test_stated_remaining_time_columns_are_what_sjf_can_know() -> None:
    # Job 1: only a time limit (1 h, 2 GPUs); job 2: steps and a profiled model, so its
    # estimate is the steps at the profiled throughput (estimates.estimate_remaining), as
    # `sjf` reads it; job 3: nothing stated.
    from slurm_rl.policies.estimates import estimate_remaining

    prof = Intent(total_steps=5000, model="resnet50", batch_size=64)
    jobs = (pending(1, 0.0, 2, time_limit_s=3600.0), pending(2, 10.0, 4, intent=prof),
            pending(3, 20.0, 1))
    f = features(snap(jobs), FeatureConfig(max_jobs=4))
    a, b, c = f.job_feats[:3]
    lt = lambda s: np.log1p(s / 60) / 10  # noqa: E731
    assert a[COL["est_remaining"]] == pytest.approx(lt(3600))
    assert a[COL["est_work"]] == pytest.approx(lt(7200))
    assert a[COL["limit_work"]] == pytest.approx(lt(7200))
    est = estimate_remaining(jobs[1], 1000.0)
    assert est is not None and est.source.value == "steps at profiled throughput"
    assert b[COL["est_remaining"]] == pytest.approx(lt(est.seconds))
    assert b[COL["est_work"]] == pytest.approx(lt(4 * est.seconds))
    assert b[COL["limit_work"]] == 0  # no time limit
    assert c[COL["est_remaining"]] == c[COL["est_work"]] == c[COL["limit_work"]] == 0


def test_teacher_columns() -> None:
    from slurm_rl.policies.rl.features import TEACHERS, teacher_column

    assert all(JOB_FEATURES[teacher_column(t)] == t for t in TEACHERS)
    with pytest.raises(ValueError, match="unknown teacher 'oracle'"):
        teacher_column("oracle")

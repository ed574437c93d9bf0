"""The cheap paths of the `rl` policy's rows and memo (policies/rl/features.py,
policies/rl/preempting.py) give what the plain ones give: `shown_rows` the first rows of
`features`, the row caches the same rows when views come back or the cluster changes,
`decision_from_scores` its order with ties and NaN scores, `Memo.fill` the lists of one `keep`
per job, `_one_fits` a fit check of every mover."""

from __future__ import annotations

import math
import random

import numpy as np

from slurm_rl.core import ClusterSnapshot, Intent, JobId, JobState, JobView, NodeName, NodeState
from slurm_rl.core import NodeView as Node
from slurm_rl.policies.capacity import Capacity, gang_parts
from slurm_rl.policies.rl.action import decision_from_scores
from slurm_rl.policies.rl.features import (
    FeatureConfig,
    RowCache,
    features,
    pending_in_order,
    running_rows,
    shown_rows,
)
from slurm_rl.policies.rl.preempting import Memo, _one_fits


def _snapshot(rng: random.Random, n_pending: int, t: float, total: int = 4
              ) -> ClusterSnapshot:
    jobs = []
    for i in range(n_pending):
        intent = (Intent(deadline=t + rng.uniform(-900, 3600)) if rng.random() < 0.3
                  else Intent(gpus_min=1, gpus_max=4) if rng.random() < 0.2 else None)
        jobs.append(JobView(id=JobId(str(i)), state=JobState.PENDING,
                            submit_time=float(rng.choice([0.0, 10.0, 20.0, t - 5.0])),
                            gpus=rng.choice([1, 2, 4, 8]), intent=intent,
                            time_limit_s=rng.choice([None, 7200.0]),
                            attained_gpu_s=rng.choice([0.0, 600.0])))
    for i in range(5):
        jobs.append(JobView(id=JobId(f"r{i}"), state=JobState.RUNNING, submit_time=0.0,
                            start_time=rng.uniform(0, t), gpus=rng.choice([1, 2, 4]),
                            time_limit_s=36000.0, managed=True))
    nodes = tuple(Node(name=NodeName(f"n{k}"), state=NodeState.MIXED, gpus_total=total,
                       gpus_alloc=rng.randint(0, total)) for k in range(6))
    return ClusterSnapshot(time=t, jobs=tuple(jobs), nodes=nodes)


def test_shown_rows_are_the_first_rows_of_features() -> None:
    rng = random.Random(3)
    cfg = FeatureConfig(max_jobs=8)
    for k in range(40):
        s = _snapshot(rng, rng.randint(0, 14), 1000.0 + 60 * k, total=rng.choice([4, 8]))
        pend = pending_in_order(s)
        assert [j.id for j in pend] == [j.id for j in sorted(
            pend, key=lambda j: (j.submit_time, int(j.id)))]
        cache = RowCache()
        f = features(s, cfg, pend, cache=cache)
        for _ in range(2):  # (the second reads the caches)
            rows, cluster, shown = shown_rows(s, cfg, pend, cache=cache)
            n = len(shown)
            assert shown == f.shown_ids
            assert rows.tobytes() == f.job_feats[:n].tobytes()
            assert cluster.tobytes() == f.cluster_feats.tobytes()
        running = s.running
        assert (running_rows(s, running, cache=cache).tobytes()
                == running_rows(s, running, cache=cache).tobytes())


def test_order_ties_and_nan_in_slot_order() -> None:
    s = _snapshot(random.Random(1), 6, 1000.0)
    pend = pending_in_order(s)
    shown = tuple(j.id for j in pend)
    scores = [0.5, math.nan, 0.5, -0.0, 0.0, math.inf]
    d = decision_from_scores(s, shown, scores, pending=pend)
    assert [o.job_id for o in d.order] == [shown[i] for i in (5, 0, 2, 3, 4, 1)]
    assert [o.rank for o in d.order] == list(range(6))
    # shown jobs that are not the first pending ones: the rest follow oldest first
    d2 = decision_from_scores(s, shown[2:4], [1.0, 2.0], pending=pend)
    assert [o.job_id for o in d2.order] == [shown[3], shown[2], shown[0], shown[1],
                                            shown[4], shown[5]]


def test_fill_is_keep_each() -> None:
    rng = random.Random(7)
    views = [JobView(id=JobId(str(i)), state=JobState.RUNNING, submit_time=rng.choice(
        [0.0, 5.0, math.nan]), gpus=1, start_time=1.0) for i in range(30)]
    scores = [rng.choice([0.1, 0.2, math.nan, -1.0]) for _ in views]
    a, b = Memo(0.5), Memo(0.5)
    for v, x in zip(views, scores, strict=True):
        a.keep(v, x, 9.0)
    assert b.fill(views, scores, 9.0)
    assert a.keys == b.keys and a.views == b.views and a.seq == b.seq
    assert np.array_equal(np.array(a.thr), np.array(b.thr), equal_nan=True)
    assert a.jobs == b.jobs
    assert not Memo(0.0).fill([views[0], views[0]], [0.1, 0.2], 9.0)  # (same id twice)


def test_one_fits_asks_every_shape() -> None:
    rng = random.Random(5)
    for _ in range(200):
        cap = Capacity([rng.randint(0, 4) for _ in range(rng.randint(1, 5))], 4)
        movers = [JobView(id=JobId(str(i)), state=JobState.PENDING, submit_time=0.0,
                          gpus=rng.choice([1, 2, 3, 4, 6, 8, 16]), nodes=rng.choice([1, 2]))
                  for i in range(rng.randint(0, 20))]
        want = any(cap.fits(gang_parts(j.gpus, j.nodes, 4)) for j in movers)
        assert _one_fits(cap, movers) == want

"""Running jobs' views say which simulated nodes they hold and how many GPUs on each
(JobView.placement, from the engine's allocation), consistently with the nodes' own counts."""

from __future__ import annotations

from collections import Counter

from sim_helpers import FakePolicy, job, run

from slurm_rl.core import Decision


def test_running_views_show_nodes_and_gpus_matching_the_nodes() -> None:
    jobs = [job(0, 0, 100, gpus=6), job(1, 0, 50, gpus=1), job(2, 10, 80, gpus=3),
            job(3, 20, 30, gpus=8), job(4, 30, 60, gpus=2)]
    policy = FakePolicy(fn=lambda snap: Decision(policy="fake"))
    result = run(jobs, policy, nodes=3, gpus_per_node=4)
    assert len(result.jobs) == len(jobs)
    multi_node = 0
    for snap in policy.seen:
        held: Counter[str] = Counter()
        for view in snap.running:
            assert len(view.placement) == view.nodes >= 1
            assert sum(g or 0 for _, g in view.placement) == view.gpus
            assert len({n for n, _ in view.placement}) == view.nodes  # each node once
            held.update({n: g or 0 for n, g in view.placement})
            multi_node += view.nodes > 1
        for view in snap.pending:
            assert view.placement == ()
        assert held == Counter({n.name: n.gpus_alloc for n in snap.nodes if n.gpus_alloc})
    assert multi_node  # the 6- and 8-GPU jobs span nodes

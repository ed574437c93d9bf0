"""The bounded preempting `rl` (`policies/rl/preempting.py`) against the straightforward one
(`reference_rl_preempt.py`: every running job scored at every decision point), decision point
by decision point on a real trace window; its guards; its per-episode memory."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from reference_rl_preempt import StraightforwardRL, nothing_fits  # noqa: E402

from slurm_rl import policies  # noqa: E402
from slurm_rl.core import Decision  # noqa: E402
from slurm_rl.policies.rl.preempting import RLPreempting  # noqa: E402
from slurm_rl.sim.config import EngineConfig  # noqa: E402
from slurm_rl.sim.engine import Simulator  # noqa: E402
from slurm_rl.sim.run import Sizing, load_jobs, resolve_trace_path, simulate  # noqa: E402

WINDOW = ("data:itp-deadline-cluster06.csv", "0:300")
ENGINE = EngineConfig(nodes=1, gpus_per_node=4, tick_s=60.0, restart_delay_s=30.0,
                      restart_grace_s=0.0, requeue_s=0.0, restart_rules=False)
"""The one-step restart model the bound below was worked out in, with free restarts (any
running job may be requeued: the trace's jobs did not opt in)."""


def _jobs():  # type: ignore[no-untyped-def]
    return load_jobs(resolve_trace_path(WINDOW[0]), "itp-deadline", WINDOW[1])


def _side_by_side(bounded: RLPreempting) -> tuple[int, int, int, list[tuple[Decision, Decision,
                                                                          bool, float]]]:
    """Run the window with the reference deciding; ask `bounded` at every decision point too,
    as the simulator would (`futile` first; an empty Decision where it skips the call).
    Returns (points, points where the reference requeues, where both do, the pairs)."""
    jobs = _jobs()
    ref = StraightforwardRL()
    nodes = Sizing(gpus_per_node=4, load=1.0).nodes_for(jobs)
    sim = Simulator(jobs, ref, replace(ENGINE, nodes=nodes))
    bounded.reset()
    pairs = []
    while (point := sim.step()) is not None:
        r = ref.decide(point.snapshot)
        b = (Decision(policy=bounded.name) if bounded.futile(point.snapshot)
             else bounded.decide(point.snapshot))
        pairs.append((r, b, nothing_fits(point.snapshot), point.snapshot.time))
        sim.apply(r)
    both = sum(1 for r, b, _, _ in pairs if r.preemptions and b.preemptions)
    return len(pairs), sum(1 for r, _, _, _ in pairs if r.preemptions), both, pairs


def test_with_rescore_0_it_decides_as_the_straightforward_version() -> None:
    """rescore_s = 0 (every running job scored at every decision): wherever the bounded policy
    plans, the same order and the same requeues; where it answers nothing, the reference
    requeues nothing either, except at instants where nothing fits, a job arrived and no
    arriving job could requeue anything on its own (the documented difference)."""
    policy = policies.make("rl", guard="off", preempt_margin=0.0, rescore_s=0.0,
                           protect_run_s="none")
    assert isinstance(policy, RLPreempting)
    points, requeued, both, pairs = _side_by_side(policy)
    assert requeued > 10  # (the window exercises preemption)
    differ = 0
    for r, b, none_fits, t in pairs:
        if b.order or b.preemptions:
            assert b.order == r.order, t
            assert b.preemptions == r.preemptions, t
        elif r.preemptions:
            assert none_fits, t  # only at arrival-only instants
            differ += 1
    print(f"{points} decision points, reference requeues at {requeued}, the bounded policy "
          f"at the same {both}; {differ} arrival-only points differ")
    assert differ < requeued


def test_default_requeues_on_scores_at_most_rescore_s_old() -> None:
    """With kept scores (rescore_s default), every job a decision requeues has a kept score at
    most rescore_s old, below the lowest score the network gives the movers + the margin."""
    policy = policies.make("rl", guard="off", preempt_margin=0.0)
    assert isinstance(policy, RLPreempting) and policy.rescore_s > 0
    jobs = _jobs()
    seen = 0
    real = policy.decide

    def checked(snapshot, *cycle):  # type: ignore[no-untyped-def]
        nonlocal seen
        d = real(snapshot, *cycle)
        for p in d.preemptions:
            _, _, scored = policy._memo.jobs[p.job_id]
            assert snapshot.time - policy.rescore_s < scored <= snapshot.time
            seen += 1
        return d

    object.__setattr__(policy, "decide", checked)
    result = simulate(jobs, policy, Sizing(gpus_per_node=4, load=1.0), engine=ENGINE)
    assert seen == result.preemptions > 0


def test_kept_scores_against_the_straightforward_version() -> None:
    """Kept scores (default rescore_s, no guard) requeue at most of the points the reference
    does; the test prints how many agree."""
    policy = policies.make("rl", guard="off", preempt_margin=0.0, protect_run_s="none")
    assert isinstance(policy, RLPreempting)
    points, requeued, both, pairs = _side_by_side(policy)
    same = sum(1 for r, b, _, _ in pairs if r.preemptions and r.preemptions == b.preemptions)
    print(f"{points} decision points, reference requeues at {requeued}, the bounded policy "
          f"too at {both}, the same jobs at {same}; the bounded policy alone at "
          f"{sum(1 for r, b, _, _ in pairs if b.preemptions and not r.preemptions)}")
    assert requeued > 10 and both > requeued // 2


def test_reset_forgets_the_kept_scores_and_a_rerun_is_identical() -> None:
    policy = policies.make("rl", guard="off", preempt_margin=0.0)
    assert isinstance(policy, RLPreempting)
    jobs = _jobs()
    def run() -> list[tuple[str, float, float, int]]:
        r = simulate(jobs, policy, Sizing(gpus_per_node=4, load=1.0), engine=ENGINE)
        assert r.preemptions > 0
        return [(j.job_id, j.start, j.end, j.restarts) for j in r.jobs]

    a = run()
    assert policy._memo.jobs  # (something kept at the end)
    policy.reset()
    assert not policy._memo.jobs and policy._memo.ids is None
    assert run() == a


@pytest.mark.parametrize(("option", "value"), [("rescore_s", -1), ("max_restarts", -1),
                                               ("protect_gpus", "x"), ("protect_run_s", -5)])
def test_bad_options_are_one_clear_error(option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option):
        policies.make("rl", guard="off", preempt_margin=0.0, **{option: value})


def test_guard_options_need_preemption() -> None:
    assert policies.make("rl", guard="off", max_restarts=1) == policies.make(
        "rl", guard="off", preempt_margin=0.0, max_restarts=1)
    with pytest.raises(ValueError, match="not with preempt_margin=none"):
        policies.make("rl", guard="off", preempt_margin="none", max_restarts=1)


def test_some_rows_are_the_rows_features_gives() -> None:
    """`some_rows` (the arrival check scores only the arriving jobs) gives a job the row and
    the cluster features `features` gives it, so the network scores it alike."""
    from slurm_rl.policies.rl.features import FeatureConfig, features, pending_in_order, some_rows

    jobs = _jobs()
    sim = Simulator(jobs, StraightforwardRL(), ENGINE)
    checked = 0
    while (point := sim.step()) is not None and checked < 50:
        snap = point.snapshot
        pend = pending_in_order(snap)
        if len(pend) >= 3:
            cfg = FeatureConfig(max_jobs=8)
            f = features(snap, cfg)
            n = len(f.shown_ids)
            some = [pend[0], pend[n - 1]]
            rows, cluster = some_rows(snap, some, len(pend), sum(j.gpus for j in pend), cfg)
            assert (rows[0] == f.job_feats[0]).all() and (rows[1] == f.job_feats[n - 1]).all()
            assert (cluster == f.cluster_feats).all()
            checked += 1
        sim.apply(Decision(policy="fifo"))
    assert checked == 50

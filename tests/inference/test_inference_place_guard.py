"""The placement guard of `inference place` / `slurm-rl plan` (plan.py): a learned scheduler's
plan for one model on an idle cluster is replaced by the request plan where that one is
predicted to finish sooner, and left alone otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.cli import main
from slurm_rl.inference import heldout, plan
from slurm_rl.inference.experiments import DATA

S1 = DATA / "drm-dql-s1.pt"
BAD_SEED = 1_000_000_054
"""A held-out setting (vgg on 3 devices at 1.07 Gbit/s) where the shipped seed-1 agent's own
plan is predicted 5.8x slower than the request plan's."""


def test_the_guard_replaces_a_plan_the_request_plan_beats() -> None:
    s = heldout.setting(BAD_SEED)
    ref = plan.place(s.profile, s.cluster, "request-plan")
    own = plan.place(s.profile, s.cluster, "drm-dql", S1, guard=False)
    kept = plan.place(s.profile, s.cluster, "drm-dql", S1)
    assert own.latency_s > 1.5 * ref.latency_s and not own.guard
    assert kept.latency_s == ref.latency_s and kept.devices == ref.devices
    assert kept.scheduler == "drm-dql (guarded)"
    assert "drm-dql's own plan" in kept.guard and "request-plan" in kept.guard
    assert plan.format_plan(kept).splitlines()[1].startswith("# guard: ")


def test_a_guarded_plan_is_never_slower_than_either_and_keeps_a_good_agent_plan() -> None:
    agent = plan.scheduler_for("drm-dql", S1)
    kept_own = 0
    for s in heldout.settings(heldout.HELD_OUT_SEEDS, 30):
        ref = plan.place(s.profile, s.cluster, "request-plan").latency_s
        own = plan.place(s.profile, s.cluster, agent, guard=False)
        g = plan.place(s.profile, s.cluster, agent)
        assert g.latency_s <= min(ref, own.latency_s)
        if not g.guard:
            assert g.devices == own.devices and g.scheduler == "drm-dql"
            kept_own += 1
    assert kept_own > 0


@pytest.mark.parametrize("name", ["heft", "whole", "request-plan"])
def test_heuristics_are_not_guarded(name: str) -> None:
    s = heldout.setting(BAD_SEED)
    p = plan.place(s.profile, s.cluster, name)
    assert p.scheduler == name and not p.guard


def test_place_says_when_the_guard_acted_and_no_guard_prints_the_agents(tmp_path: Path) -> None:
    c = Path("examples/inference/cluster.toml")
    guarded = CliRunner().invoke(main, ["inference", "place", "resnet", "--cluster", str(c)])
    raw = CliRunner().invoke(main, ["inference", "place", "resnet", "--cluster", str(c),
                                    "--no-guard"])
    assert guarded.exit_code == 0 and raw.exit_code == 0, guarded.output + raw.output
    assert guarded.output.startswith("# resnet by drm-dql (guarded): predicted latency 1.306 ms")
    assert guarded.output.splitlines()[1].startswith("# guard: drm-dql's own plan (1.406 ms")
    assert raw.output.startswith("# resnet by drm-dql: predicted latency 1.406 ms")
    assert "# guard" not in raw.output


def test_the_guards_estimate_is_the_request_plans_own_placement() -> None:
    from slurm_rl.inference.schedulers import RequestPlan

    agent = plan.scheduler_for("drm-dql", S1)
    for s in heldout.settings(heldout.HELD_OUT_SEEDS, 40):
        g = plan.place(s.profile, s.cluster, agent)
        if g.guard:
            ref = plan._place(s.profile, s.cluster, RequestPlan())
            assert (g.devices, g.finish_s, g.compute_s) == (ref.devices, ref.finish_s,
                                                           ref.compute_s)

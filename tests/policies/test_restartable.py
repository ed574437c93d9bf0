"""The preemptive policies plan requeues only of running jobs whose requeue would be carried
out (JobView.restartable: live, jobs that opted in with --rl-elastic; the daemon refuses the
rest, so asking for them only keeps the jobs that could go from going)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from policy_builders import NOW, job, nodes, running, snap

from slurm_rl import policies

DAY = 86400.0


@pytest.mark.parametrize("name", ["gittins", "tiresias"])
def test_a_run_that_may_not_be_restarted_is_never_planned_for_a_requeue(name: str) -> None:
    # One 4-GPU node held for a day by "long"; "short" (4 GPUs) waits: each policy requeues
    # "long" for it when it may, and asks for nothing when it may not.
    long = running("long", gpus=4, submit=NOW - DAY, start=NOW - DAY, attained_gpu_s=4 * DAY)
    short = job("short", submit=NOW - 700, gpus=4)
    may = policies.make(name).decide(snap(long, short, nodes=nodes(1)))
    assert [p.job_id for p in may.preemptions] == ["long"]
    may_not = policies.make(name).decide(
        snap(replace(long, restartable=False), short, nodes=nodes(1)))  # type: ignore[arg-type]
    assert may_not.preemptions == ()

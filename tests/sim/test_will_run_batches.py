"""slurmctld's will-run batches in conservative backfill (EngineConfig.will_run_window_s): a
blocked job is planned with running jobs freed in batches, at the batch's last end, on the
node its placement picks among all that the batch frees; not on the node that frees first."""

from __future__ import annotations

import pytest
from sim_helpers import by_id, job, run

from slurm_rl.policies import make
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.conservative import will_run_batches


def test_a_batch_is_every_end_up_to_the_rounded_first_end_plus_the_window() -> None:
    # First end 17 -> anchor 30; everything up to 60 is one batch.
    assert will_run_batches([17, 20, 28, 28, 32], 30) == [(0, 5)]


def test_the_window_doubles_after_each_batch() -> None:
    # anchor 30: <= 60 | window 60: <= 90 | 120: <= 150 | 240: <= 270 | 480: <= 510
    assert will_run_batches([10, 50, 70, 95, 200, 500], 30) == [
        (0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]


def test_an_end_on_the_window_boundary_is_rounded_up_a_whole_window() -> None:
    assert will_run_batches([30, 90, 91], 30) == [(0, 2), (2, 3)]
    assert will_run_batches([], 30) == []


# Two 4-GPU nodes. Y (3 GPUs, limit 310) takes node1 and X (3 GPUs, limit 300) node2, both
# at 0; P needs a whole node, Q one GPU (limit 300). X ends at 20, Y at 40.
JOBS = [job("Y", 0, 40, 3, time_limit_s=310), job("X", 0, 20, 3, time_limit_s=300),
        job("P", 11, 10, 4, time_limit_s=300), job("Q", 12, 100, 1, time_limit_s=300)]


def nodes_of(result: object) -> dict[str, tuple[str, ...]]:
    return {iv.job_id: iv.nodes for iv in result.intervals}  # type: ignore[attr-defined]


def test_exact_ends_plan_the_blocked_job_on_the_node_that_frees_first() -> None:
    # P is planned on node2 (free at 300 by the limits), so Q goes to node1, and P starts on
    # node2 when X ends at 20.
    got = run(JOBS, make("fifo"), nodes=2, gpus_per_node=4, conservative=True)
    assert by_id(got)["P"] == (20, 30)
    assert by_id(got)["Q"] == (12, 112)
    assert nodes_of(got)["Q"] == nodes_of(got)["Y"] != nodes_of(got)["P"]


def test_batched_ends_plan_it_where_placement_picks_among_the_batch() -> None:
    # 300 and 310 are one batch: P is planned at 310 on the node best fit picks with both
    # free (node1, the first), so Q takes node2's free GPU and P waits for Y, until 40.
    got = run(JOBS, make("fifo"), nodes=2, gpus_per_node=4, conservative=True,
              will_run_window_s=30)
    assert by_id(got)["P"] == (40, 50)
    assert by_id(got)["Q"] == (12, 112)
    assert nodes_of(got)["Q"] == nodes_of(got)["X"] != nodes_of(got)["P"]


def test_the_window_and_the_clock_origin_decide_the_batches() -> None:
    # A window shorter than the ends' gap splits them: back to the exact plan.
    split = run(JOBS, make("fifo"), nodes=2, gpus_per_node=4, conservative=True,
                will_run_window_s=4)
    assert by_id(split)["P"] == (20, 30)
    # Y's limit at 340: with trace second 0 at epoch 0 the ends 300 and 340 are one batch
    # (anchor 330, up to 360); at epoch 29 they are 329 and 369, and 369 is past 360. (Q's
    # limit at 600 so that it would overlap P's plan on either node.)
    jobs = [job("Y", 0, 40, 3, time_limit_s=340), JOBS[1], JOBS[2],
            job("Q", 12, 100, 1, time_limit_s=600)]
    got = {origin: by_id(run(jobs, make("fifo"), nodes=2, gpus_per_node=4, conservative=True,
                             will_run_window_s=30, clock_origin_s=origin))["P"]
           for origin in (0.0, 29.0)}
    assert got == {0.0: (40, 50), 29.0: (20, 30)}


@pytest.mark.parametrize("value", [-1.0, float("inf")])
def test_the_window_must_be_finite_and_not_negative(value: float) -> None:
    with pytest.raises(ValueError, match="will_run_window_s"):
        EngineConfig(nodes=1, gpus_per_node=1, will_run_window_s=value)


def test_the_clock_origin_must_be_finite() -> None:
    with pytest.raises(ValueError, match="clock_origin_s"):
        EngineConfig(nodes=1, gpus_per_node=1, clock_origin_s=float("nan"))

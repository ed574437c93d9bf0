"""Conservative backfill (every examined job gets a reservation, as slurmctld's backfill does)
against EASY (only the top blocked job is protected), worked by hand.

Two nodes of 4 GPUs, FIFO order, time limits equal to run times:

    job  submit  GPUs  runs
    A      0      4    100    node1 until 100
    B      0      3     20    node2 until 20 (1 GPU free there)
    C      1      8     10    both nodes: blocked until A ends -> reserved [100, 110)
    D      2      4     30    blocked; conservative: reserved on node2 [20, 50)
    E      5      1     90    EASY: 5 + 90 <= 100 (C's shadow) -> backfills now on node2,
                              which then keeps D from starting until after C.
                              Conservative: E on node2 would overlap D's reservation, node1 is
                              busy, and after D it would overlap C's -> E waits for C.
"""

from __future__ import annotations

from sim_helpers import by_id, job, run

from slurm_rl.policies import make

JOBS = [job("A", 0, 100, 4, time_limit_s=100), job("B", 0, 20, 3, time_limit_s=20),
        job("C", 1, 10, 8, time_limit_s=10), job("D", 2, 30, 4, time_limit_s=30),
        job("E", 5, 90, 1, time_limit_s=90)]


def test_easy_protects_only_the_top_job() -> None:
    got = by_id(run(JOBS, make("fifo"), nodes=2, gpus_per_node=4))
    assert got["E"] == (5, 95)
    assert got["C"] == (100, 110)
    assert got["D"] == (110, 140)


def test_conservative_protects_every_examined_job() -> None:
    got = by_id(run(JOBS, make("fifo"), nodes=2, gpus_per_node=4, conservative=True))
    assert got["D"] == (20, 50)
    assert got["C"] == (100, 110)
    assert got["E"] == (110, 200)


def test_conservative_reservation_holds_whole_nodes() -> None:
    """Measured on the test cluster (Slurm 22.05): node2-node4 busy for 10 minutes, node1 half
    busy (2 GPUs, limit 1 min); P (3 GPUs) is planned on node1 when that job's limit ends; Q
    (1 GPU, 5 min) fits on node1 now and would leave P its 3 GPUs, yet slurmctld left it
    pending until P's window: backfill reservations are whole nodes."""
    jobs = [job("L2", 0, 120, 4, time_limit_s=600), job("L3", 0, 120, 4, time_limit_s=600),
            job("L4", 0, 120, 4, time_limit_s=600), job("A", 0, 40, 2, time_limit_s=60),
            job("P", 2, 30, 3, time_limit_s=300), job("Q", 3, 30, 1, time_limit_s=300)]
    got = by_id(run(jobs, make("fifo"), nodes=4, gpus_per_node=4, conservative=True))
    assert got["P"] == (40, 70)
    assert got["Q"] == (40, 70)  # with P, when A ends: the main scheduler, in order
    easy = by_id(run(jobs, make("fifo"), nodes=4, gpus_per_node=4))
    assert easy["Q"] == (3, 33)  # EASY: Q leaves P its GPUs, so it backfills at once

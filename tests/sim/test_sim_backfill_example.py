"""EASY backfill worked by hand, with the registry's `fifo` (Slurm's default order).

One node of 4 GPUs; time limits are given explicitly and differ from run times, because Slurm
plans reservations from limits:

    job  submit  GPUs  runs  limit
    J1     0      2     10    10    starts at 0 (fits)
    J2     1      4      5     5    blocked: needs 4, 2 free. Reservation: J1's limit ends at
                                     10 -> J2 is promised t=10 on the whole node.
    J3     2      2      5     8    2 + 8 = 10 <= 10: backfills at 2, ends at 7.
    J4     3      1      2    20    t=3: nothing free. t=7: 2 free, but 7 + 20 > 10 and every
                                     GPU is promised to J2 at 10 -> waits; starts at 15.
    J5     4      2      1     6    t=7: would END at 8 if Slurm knew, but its limit ends at
                                     13 > 10 -> waits (this is the limits-not-durations point);
                                     starts at 15 beside J4.
    J6     5      1      3     3    t=7: 7 + 3 = 10 <= 10 -> backfills at 7, ends at 10.
    t=10: J1 and J6 end, J2 starts (priority order), ends 15; J4 and J5 start at 15.
"""

from __future__ import annotations

from dataclasses import replace

from sim_helpers import EXACT_LIMITS, by_id, job, run

from slurm_rl.policies import make

JOBS = [
    job("J1", 0, 10, 2, time_limit_s=10), job("J2", 1, 5, 4, time_limit_s=5),
    job("J3", 2, 5, 2, time_limit_s=8), job("J4", 3, 2, 1, time_limit_s=20),
    job("J5", 4, 1, 2, time_limit_s=6), job("J6", 5, 3, 1, time_limit_s=3),
]


def test_fifo_easy_backfill_by_hand() -> None:
    got = by_id(run(JOBS, make("fifo"), nodes=1, gpus_per_node=4))
    assert got == {"J1": (0, 10), "J2": (10, 15), "J3": (2, 7), "J4": (15, 17),
                   "J5": (15, 16), "J6": (7, 10)}


def test_planning_with_true_durations_differs() -> None:
    # Limits equal to run times: at t=7 J4 (7 + 2 <= 10) backfills first, then J6; J5 finds
    # one GPU left and waits for J2 as before.
    jobs = [replace(j, time_limit_s=None) for j in JOBS]
    got = by_id(run(jobs, make("fifo"), nodes=1, gpus_per_node=4, time_limit=EXACT_LIMITS))
    assert got["J4"] == (7, 9) and got["J6"] == (7, 10)
    assert got["J2"] == (10, 15) and got["J5"] == (15, 16)


def test_strict_priority_without_backfill() -> None:
    got = by_id(run(JOBS, make("fifo"), nodes=1, gpus_per_node=4, backfill=False))
    # Nothing passes J2. At 15 J3 and J4 start; J5 (2 GPUs, 1 free) blocks J6 until J4 ends.
    assert got["J2"] == (10, 15)
    assert got["J3"] == (15, 20) and got["J4"] == (15, 17)
    assert got["J5"] == (17, 18) and got["J6"] == (18, 21)


def test_backfill_into_gpus_the_reservation_does_not_need() -> None:
    """Two nodes x 4 GPUs. A holds node1 for 100 s. B (6 GPUs = 3 + 3 on two nodes, as cons_tres
    splits it) is promised t=100 and leaves one GPU per node spare. C (1 GPU, long) fits in a
    spare GPU and starts now; D (2 GPUs, long) would take a promised GPU and waits."""
    jobs = [job("A", 0, 100, 4, time_limit_s=100), job("B", 1, 10, 6, time_limit_s=10),
            job("C", 2, 500, 1, time_limit_s=500), job("D", 3, 500, 2, time_limit_s=500)]
    got = by_id(run(jobs, make("fifo"), nodes=2, gpus_per_node=4))
    assert got["A"] == (0, 100)
    assert got["C"] == (2, 502)
    assert got["B"] == (100, 110)  # not delayed by C
    assert got["D"] == (110, 610)


def test_a_long_backfill_job_keeps_off_the_reserved_node() -> None:
    """A (2 GPUs) on node1, B (3 GPUs) on node2; C (4 GPUs) is promised node2 when B ends at
    50. D (1 GPU, long) would best-fit into node2's last free GPU, but that GPU is promised:
    it goes to node1 instead, and C starts on time."""
    jobs = [job("A", 0, 100, 2, time_limit_s=100), job("B", 0, 50, 3, time_limit_s=50),
            job("C", 1, 10, 4, time_limit_s=10), job("D", 2, 500, 1, time_limit_s=500)]
    r = run(jobs, make("fifo"), nodes=2, gpus_per_node=4)
    got = by_id(r)
    assert got["D"] == (2, 502) and got["C"] == (50, 60)
    assert {iv.job_id: iv.nodes for iv in r.intervals}["D"] == ("node1",)

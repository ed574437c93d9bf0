"""srtf-oracle and tiresias: ordering and preemption on hand-built snapshots."""

from __future__ import annotations

from policy_builders import ids, job, nodes, oracle_policy, order_of, preempted, running, snap

from slurm_rl.core import JobState
from slurm_rl.policies import make

# --- srtf-oracle -------------------------------------------------------------------------------


def test_srtf_orders_by_true_remaining() -> None:
    truth = {"a": 30, "b": 10}
    s = snap(job("a"), job("b"), job("c"),
             nodes=nodes(0))
    d = oracle_policy("srtf-oracle", truth).decide(s)
    assert ids(d) == ["b", "a", "c"]
    assert all("oracle" in o.reason for o in d.order)
    assert not d.preemptions


def test_srtf_preempts_the_longest_running_job_when_needed() -> None:
    truth = {"long": 5000, "longer": 9000, "short": 10, "p": 100}
    s = snap(running("long", gpus=4),
             running("longer", gpus=4),
             running("short", gpus=4),
             job("p", gpus=4), nodes=nodes(4, 4, 4))
    d = oracle_policy("srtf-oracle", truth).decide(s)
    assert preempted(d) == ["longer"]
    assert "true remaining 2.5h > 100s of job p (4 GPUs)" in d.preemptions[0].reason


def test_srtf_no_preemption_when_it_fits_or_nothing_is_longer() -> None:
    truth = {"long": 5000, "p": 100, "r": 50}
    fits = snap(running("long", gpus=2),
                job("p", gpus=2), nodes=nodes(2))
    assert not oracle_policy("srtf-oracle", truth).decide(fits).preemptions
    shorter = snap(running("r", gpus=4),
                   job("p", gpus=4), nodes=nodes(4))
    assert not oracle_policy("srtf-oracle", truth).decide(shorter).preemptions


def test_srtf_margin() -> None:
    truth = {"r": 150, "p": 100}
    s = snap(running("r", gpus=4),
             job("p", gpus=4), nodes=nodes(4))
    assert preempted(oracle_policy("srtf-oracle", truth).decide(s)) == ["r"]
    assert not oracle_policy("srtf-oracle", truth, margin_s=60).decide(s).preemptions


def test_srtf_gang_across_nodes_and_never_for_held_or_unknown() -> None:
    truth = {"a": 900, "b": 800, "c": 1000, "p": 10, "held": 1}
    # An 8-GPU job needs two whole 4-GPU nodes: both 4-GPU runners go, the 1-GPU one stays.
    s = snap(running("a", gpus=4),
             running("b", gpus=4),
             running("c", gpus=1),
             running("unknown", gpus=3), job("p", gpus=8),
             job("held", gpus=1, held=True),
             nodes=nodes(4, 4, 4))
    d = oracle_policy("srtf-oracle", truth).decide(s)
    assert preempted(d) == ["a", "b"]
    held = snap(running("a", gpus=4),
                job("held", gpus=4, held=True), nodes=nodes(4))
    assert not oracle_policy("srtf-oracle", truth).decide(held).preemptions


def test_srtf_does_not_preempt_unmanaged_or_completing_jobs() -> None:
    truth = {"u": 900, "c": 900, "p": 1}
    s = snap(running("u", gpus=4, managed=False),
             job("c", state=JobState.COMPLETING, gpus=4),
             job("p", gpus=4), nodes=nodes(4, 4))
    assert not oracle_policy("srtf-oracle", truth).decide(s).preemptions


# --- tiresias ----------------------------------------------------------------------------------


def test_tiresias_queues_then_fifo() -> None:
    s = snap(job("old-heavy", submit=0, attained_gpu_s=5000),
             job("new", submit=10), job("newer", submit=20),
             job("older-light", submit=5, attained_gpu_s=100), nodes=nodes(4))
    d = make("tiresias").decide(s)
    assert ids(d) == ["older-light", "new", "newer", "old-heavy"]
    assert order_of(d, "old-heavy").reason.startswith("Q1 (attained 5000 GPU-s >= 3600)")
    assert order_of(d, "new").reason.startswith("Q0 (attained 0 GPU-s < 3600)")


def test_tiresias_three_queues() -> None:
    p = make("tiresias", thresholds=(100, 1000))
    s = snap(job("a", attained_gpu_s=2000), job("b", attained_gpu_s=500, submit=1),
             job("c", attained_gpu_s=50, submit=2))
    assert ids(p.decide(s)) == ["c", "b", "a"]


def test_tiresias_preempts_lower_queue_only() -> None:
    s = snap(running("q1-old", gpus=2, submit=0, attained_gpu_s=9000),
             running("q1-new", gpus=2, submit=5, attained_gpu_s=9000),
             running("q0", gpus=4, submit=1, attained_gpu_s=10),
             job("p", gpus=2, submit=9), nodes=nodes(4, 4))
    d = make("tiresias").decide(s)
    assert preempted(d) == ["q1-new"]  # lowest queue, latest submitted first
    assert "Q1" in d.preemptions[0].reason and "job p of Q0" in d.preemptions[0].reason


def test_tiresias_no_preemption_within_a_queue() -> None:
    s = snap(running("r", gpus=4, submit=5), job("p", gpus=4, submit=0), nodes=nodes(4))
    assert not make("tiresias").decide(s).preemptions
    s = snap(running("r", gpus=4, attained_gpu_s=9000), job("p", gpus=4, attained_gpu_s=4000),
             nodes=nodes(4))
    assert not make("tiresias").decide(s).preemptions


def test_tiresias_promotes_a_starving_job() -> None:
    p = make("tiresias", promote_knob=2)
    # ran 1000 s on 4 GPUs (4000 GPU-s: Q1), preempted at t=1000.
    p.decide(snap(running("j", gpus=4, attained_gpu_s=4000), nodes=nodes(4), time=1000))
    waiting = job("j", gpus=4, attained_gpu_s=4000, submit=0)
    other = job("k", gpus=4, submit=500)
    d = p.decide(snap(waiting, other, running("x", gpus=4), nodes=nodes(4), time=2900))
    assert ids(d) == ["k", "j"]  # waited 1900 s < 2 x 1000 s
    d = p.decide(snap(waiting, other, running("x", gpus=4), nodes=nodes(4), time=3000))
    assert ids(d) == ["j", "k"]
    assert "promoted: waited 33m >= 2 x 17m run" in order_of(d, "j").reason
    # it runs and stays in Q0 until it has attained another 3600 GPU-s, then goes back to Q1
    p.decide(snap(running("j", gpus=4, attained_gpu_s=7000), other, nodes=nodes(4), time=3100))
    p.decide(snap(running("j", gpus=4, attained_gpu_s=7700), other, nodes=nodes(4), time=3200))
    d = p.decide(snap(job("j", gpus=4, attained_gpu_s=7700), other, running("x", gpus=4),
                      nodes=nodes(4), time=3300))
    assert ids(d) == ["k", "j"]
    assert order_of(d, "j").reason.startswith("Q1 (attained 3700 GPU-s")


def test_tiresias_promotion_disabled() -> None:
    p = make("tiresias", promote_knob=0)
    s = snap(job("j", gpus=4, attained_gpu_s=4000), job("k", submit=1), time=1e9)
    assert ids(p.decide(s)) == ["k", "j"]


def test_tiresias_forgets_jobs_that_left() -> None:
    p = make("tiresias")
    p.decide(snap(running("j", gpus=1)))
    p.decide(snap())
    assert not p._last_run  # type: ignore[attr-defined]


def test_tiresias_wait_clock_starts_when_first_seen() -> None:
    p = make("tiresias", promote_knob=1)
    j = job("j", gpus=4, attained_gpu_s=4000)  # ran 1000 s on 4 GPUs before this instance
    k = job("k", submit=1)
    assert ids(p.decide(snap(j, k, time=1e6))) == ["k", "j"]
    assert ids(p.decide(snap(j, k, time=1e6 + 999))) == ["k", "j"]
    assert ids(p.decide(snap(j, k, time=1e6 + 1000))) == ["j", "k"]

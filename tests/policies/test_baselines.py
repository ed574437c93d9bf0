"""fifo, edf, sjf and sjf-oracle: orderings on hand-built snapshots."""

from __future__ import annotations

from policy_builders import NOW, ids, job, nodes, oracle_policy, order_of, running, snap

from slurm_rl.core import Intent, JobState, Progress
from slurm_rl.policies import make


def test_fifo_is_submit_order_ties_by_numeric_id() -> None:
    s = snap(job("10", submit=5), job("9", submit=5), job("3", submit=7), job("100", submit=1),
             running("1"), job("2", submit=0, managed=False), nodes=nodes(0))
    d = make("fifo").decide(s)
    assert ids(d) == ["100", "9", "10", "3"]
    assert [o.rank for o in d.order] == [0, 1, 2, 3]
    assert all(o.reason == "submit order" and o.gpus is None for o in d.order)
    assert not d.preemptions and not d.resizes


def test_fifo_array_ids() -> None:
    s = snap(job("7_10"), job("7_2"), job("7_1"))
    assert ids(make("fifo").decide(s)) == ["7_1", "7_2", "7_10"]


def test_fifo_includes_requeued_and_held_jobs() -> None:
    s = snap(job("1", state=JobState.REQUEUED, submit=2), job("2", held=True, submit=1))
    assert ids(make("fifo").decide(s)) == ["2", "1"]


def test_edf_deadlines_first_then_submit_order() -> None:
    s = snap(job("a", submit=1), job("b", submit=2, intent=Intent(deadline=NOW + 500)),
             job("c", submit=3, intent=Intent(deadline=NOW + 100)), job("d", submit=0),
             job("e", submit=4, intent=Intent(deadline=NOW + 100)))
    d = make("edf").decide(s)
    assert ids(d) == ["c", "e", "b", "d", "a"]
    assert "deadline t=10100s (in 100s)" in order_of(d, "c").reason
    assert order_of(d, "a").reason.startswith("no deadline")


def test_edf_epoch_deadline_is_shown_in_utc() -> None:
    now = 1_700_000_000.0
    s = snap(job("a", intent=Intent(deadline=now + 3600)), time=now)
    assert "2023-11-14 23:13Z (in 60m)" in make("edf").decide(s).order[0].reason


def test_sjf_uses_what_it_can_know() -> None:
    # Progress counts once a job has run: these two were requeued after running.
    ran = {"restarts": 1, "attained_gpu_s": 600.0}
    s = snap(
        job("limit", submit=0, time_limit_s=600),
        job("pred", submit=1, predicted_remaining_s=300,
            progress=Progress(steps_done=100, steps_total=700, rate=2.0), **ran),
        job("prog", submit=2, progress=Progress(steps_done=100, steps_total=1100, rate=2.0),
            **ran),
        job("none", submit=3),
    )
    d = make("sjf").decide(s)
    assert ids(d) == ["pred", "prog", "limit", "none"]
    assert "progress" in order_of(d, "prog").reason
    assert "default" in order_of(d, "none").reason


def test_sjf_profiled_throughput_from_intent() -> None:
    # resnet50 at batch 64 runs ~6.8 it/s on one A100: 680 steps ≈ 100 s.
    it = Intent(total_steps=680, model="resnet50", batch_size=64)
    s = snap(job("long", submit=0, time_limit_s=200), job("steps", submit=1, intent=it))
    d = make("sjf").decide(s)
    assert ids(d) == ["steps", "long"]
    assert "profiled" in order_of(d, "steps").reason


def test_sjf_learns_run_times_from_history() -> None:
    p = make("sjf", min_history=2)
    # alice's 1-GPU jobs vanish from the snapshot after ~100 s; bob's are seen COMPLETED with
    # their end time after 1000 s.
    for k in range(2):
        t0 = k * 2000.0
        p.decide(snap(running(f"a{k}", user="alice", start=t0),
                      running(f"b{k}", user="bob", start=t0), time=t0 + 1))
        p.decide(snap(running(f"b{k}", user="bob", start=t0), time=t0 + 100))
        p.decide(snap(job(f"b{k}", state=JobState.COMPLETED, start=t0, end_time=t0 + 1000,
                          user="bob"), time=t0 + 1500))
    s = snap(job("bob1", user="bob", submit=0), job("alice1", user="alice", submit=1),
             job("carol1", user="carol", submit=2, time_limit_s=50),
             job("dave1", user="dave", submit=3), time=5000)
    d = p.decide(s)
    assert ids(d) == ["carol1", "alice1", "dave1", "bob1"]
    assert "history of user 'alice' at 1 GPUs, 2 runs" in order_of(d, "alice1").reason
    assert "expected 17m (history of user 'bob' at 1 GPUs" in order_of(d, "bob1").reason
    # dave is unknown: the mean of all jobs (4 runs: 100, 100, 1000, 1000).
    assert "expected 9m (history of all jobs, 4 runs)" in order_of(d, "dave1").reason


def test_sjf_history_subtracts_attained_service() -> None:
    p = make("sjf", min_history=1)
    p.decide(snap(running("r", user="u", start=0), time=1))
    p.decide(snap(time=1000))
    d = p.decide(snap(job("fresh", user="u", submit=0),
                      job("requeued", user="u", submit=1, gpus=1, attained_gpu_s=900),
                      time=2000))
    assert ids(d) == ["requeued", "fresh"]


def test_sjf_oracle_orders_by_true_remaining() -> None:
    truth = {"a": 50, "b": 5, "d": 5}
    s = snap(job("a"), job("b"),
             job("c"), job("d", submit=-1))
    d = oracle_policy("sjf-oracle", truth).decide(s)
    assert ids(d) == ["d", "b", "a", "c"]
    assert all("oracle" in o.reason for o in d.order)
    assert not d.preemptions


def test_oracle_policies_without_an_oracle_know_no_true_duration() -> None:
    # Anywhere but the simulator nothing binds an oracle: submit order, said so.
    s = snap(job("b", submit=1), job("a", submit=0), nodes=nodes(0))
    for name in ("sjf-oracle", "srtf-oracle"):
        d = make(name).decide(s)
        assert ids(d) == ["a", "b"] and not d.preemptions
        assert all("no true duration known" in o.reason for o in d.order)

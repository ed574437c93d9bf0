"""What happens at the end of a restart's grace step (EngineConfig.restart_grace_s), as live:
a job whose work is done within its grace completes and the restart is void; with
restart_rules a resize is judged again when the grace ends, at the count the policy asks for
then, and dropped when neither that nor the signalled count still passes."""

from __future__ import annotations

from sim_helpers import FakePolicy, by_id, job, run

from slurm_rl.core import ClusterSnapshot, Decision, JobState, JobView, Preempt, Resize

GRACE, REQUEUE, RESTORE = 5.0, 3.0, 7.0
STEPS = {"restart_grace_s": GRACE, "requeue_s": REQUEUE, "restart_delay_s": RESTORE}


def running(s: ClusterSnapshot) -> dict[str, JobView]:
    return {j.name: j for j in s.jobs if j.state is JobState.RUNNING}


def elastic(i: str, submit: float, duration: float, gpus: int = 1) -> object:
    return job(i, submit, duration, gpus, total_steps=int(duration), model="resnet50",
               gpus_min=1, gpus_max=4, elastic=True)


def asks(plan: dict[float, int | None]) -> FakePolicy:
    """A fake policy: at each time in `plan`, resize running job "a" to that count (None:
    preempt it)."""
    def fn(s: ClusterSnapshot) -> Decision:
        r = running(s)
        if s.time not in plan or "a" not in r:
            return Decision(policy="p")
        gpus = plan[s.time]
        if gpus is None:
            return Decision(policy="p", preemptions=(Preempt(job_id=r["a"].id),))
        return Decision(policy="p", resizes=(Resize(job_id=r["a"].id, gpus=gpus),))

    return FakePolicy(fn)


def test_a_job_that_finishes_in_its_grace_step_completes_and_is_not_restarted() -> None:
    # a is signalled at 97 with 3 s of work left and a 5 s grace: it ends at 100, not after a
    # requeue and restore, and the preemption does not count.
    jobs = [job("a", 0, 100, 4), job("t", 97, 1, 4)]
    r = run(jobs, asks({97.0: None}), tick_s=0, restart_rules=False, **STEPS)
    assert by_id(r)["a"] == (0, 100)
    assert (r.preemptions, r.jobs[0].restarts) == (0, 0)
    assert r.notes == {"restart void: the job finished in its grace step": 1}


def test_a_job_with_more_work_than_its_grace_is_restarted() -> None:
    jobs = [job("a", 0, 100, 4), job("t", 90, 1, 4)]
    r = run(jobs, asks({90.0: None}), tick_s=0, restart_rules=False, **STEPS)
    assert (r.preemptions, r.jobs[0].restarts) == (1, 1)
    assert by_id(r)["a"][1] == 90 + GRACE + REQUEUE + RESTORE + 10


def test_a_grow_whose_gpus_are_gone_at_the_grace_end_is_dropped_and_the_job_runs_on() -> None:
    # a (1 GPU) is signalled at 10 to grow to 4; b takes 3 of the node's GPUs at 12, so at 15
    # the 4 no longer fit: no restart, and a keeps the steps it made in its grace.
    jobs = [elastic("a", 0, 1000), job("t", 10, 1, 1), job("b", 12, 500, 3)]
    r = run(jobs, asks({10.0: 4}), tick_s=0, restart_rules=True, **STEPS)
    a = next(j for j in r.jobs if j.job_id == "a")
    assert (r.resizes, a.restarts, a.gpus) == (0, 0, 1)
    assert by_id(r)["a"] == (0, 1000)
    assert r.notes == {"resize dropped after the signal: does not fit": 1}


def test_the_count_asked_for_during_the_grace_is_the_one_restarted_at() -> None:
    # a is signalled at 10 to grow to 4, and at 12 (b arrives, taking 2 GPUs) the policy asks
    # for 2 instead: at the grace end a restarts at 2, the count the daemon would judge then.
    jobs = [elastic("a", 0, 1000), job("t", 10, 1, 1), job("b", 12, 500, 2)]
    r = run(jobs, asks({10.0: 4, 12.0: 2}), tick_s=0, restart_rules=True, **STEPS)
    a = next(j for j in r.jobs if j.job_id == "a")
    assert (r.resizes, a.restarts, a.gpus) == (1, 1, 2)
    assert r.notes == {"resize of a job already restarting": 1}


def test_without_the_rules_the_signalled_count_stands() -> None:
    jobs = [elastic("a", 0, 1000), job("t", 10, 1, 1), job("b", 12, 500, 2)]
    r = run(jobs, asks({10.0: 4, 12.0: 2}), tick_s=0, restart_rules=False, **STEPS)
    a = next(j for j in r.jobs if j.job_id == "a")
    assert (r.resizes, a.gpus) == (1, 4)

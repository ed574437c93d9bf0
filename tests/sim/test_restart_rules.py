"""EngineConfig.restart_rules (the default): the simulator restarts running jobs only as the
daemon would live (jobs that opted in only; a grow that saves more than the restart delay; no
shrink of a job about to finish; at most max_restarts_per_hour per job). Off (free restarts),
every restart that fits is made."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner
from sim_helpers import ONE_STEP, FakePolicy, by_id, job, run

from slurm_rl.cli import main as cli_main
from slurm_rl.core import ClusterSnapshot, Decision, JobState, JobView, Preempt, Resize
from slurm_rl.policies.restart_gate import Gain, restart_gain
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.jobs import gpu_range, make_jobs


def running(s: ClusterSnapshot) -> dict[str, JobView]:
    return {j.name: j for j in s.jobs if j.state is JobState.RUNNING}


def elastic(i: str, submit: float, duration: float, gpus: int = 1, **kw: object) -> object:
    return job(i, submit, duration, gpus, total_steps=int(duration), model="resnet50",
               gpus_min=1, gpus_max=4, elastic=True, **kw)


def grow_a_at(*times: float) -> FakePolicy:
    """A fake policy: at each of `times`, grow running job "a" to 4 GPUs."""
    def fn(s: ClusterSnapshot) -> Decision:
        r = running(s)
        if s.time in times and "a" in r:
            return Decision(policy="p", resizes=(Resize(job_id=r["a"].id, gpus=4),))
        return Decision(policy="p")

    return FakePolicy(fn)


def test_a_grow_that_does_not_save_the_restart_delay_is_refused_only_with_the_rules() -> None:
    # 60 s left at 1 GPU at t=40: 4 GPUs save < 60 s, less than a 100 s restart delay.
    jobs = [elastic("a", 0, 100), job("tick", 40, 1)]
    free = run(jobs, grow_a_at(40), gpus_per_node=4, restart_delay_s=100, restart_rules=False,
               **ONE_STEP)
    ruled = run(jobs, grow_a_at(40), gpus_per_node=4, restart_delay_s=100, restart_rules=True,
                **ONE_STEP)
    assert (free.resizes, free.jobs[0].restarts) == (1, 1)
    assert (ruled.resizes, ruled.jobs[0].restarts) == (0, 0)
    assert by_id(ruled)["a"] == (0, 100)  # ran on at 1 GPU
    assert ruled.notes == {
        "resize refused by the restart rules: the predicted gain does not beat the restart "
        "delay": 1}


def test_a_grow_that_pays_is_made_with_the_rules() -> None:
    jobs = [elastic("a", 0, 10_000), job("tick", 10, 1)]
    ruled = run(jobs, grow_a_at(10), gpus_per_node=4, restart_delay_s=30, restart_rules=True)
    assert (ruled.resizes, ruled.jobs[0].gpus, ruled.notes) == (1, 4, {})


def test_only_elastic_jobs_are_preempted_and_at_most_the_cap_per_hour() -> None:
    # The policy preempts every running job whenever "b" waits; the cap lets "a" restart twice
    # in the hour, the rigid "r" never.
    def fn(s: ClusterSnapshot) -> Decision:
        r = running(s)
        if s.time in (100.0, 200.0, 300.0, 4000.0):
            return Decision(policy="p", preemptions=tuple(
                Preempt(job_id=v.id) for n, v in sorted(r.items()) if n in ("a", "r")))
        return Decision(policy="p")

    jobs = [elastic("a", 0, 10_000), job("r", 0, 10_000), job("t1", 100, 1),
            job("t2", 200, 1), job("t3", 300, 1), job("t4", 4000, 1)]
    ruled = run(jobs, FakePolicy(fn), gpus_per_node=4, restart_delay_s=30, restart_rules=True,
                max_restarts_per_hour=2)
    a, r = (next(j for j in ruled.jobs if j.job_id == n) for n in ("a", "r"))
    # t=100 and 200 restart "a"; t=300 is its third in the hour (refused); t=4000 is a new hour
    assert (a.restarts, r.restarts, ruled.preemptions) == (3, 0, 3)
    assert ruled.notes == {"preempt refused by the restart rules: not opted in (--rl-elastic)": 4,
                           "preempt refused by the restart rules: max_restarts_per_hour": 1}
    free = run(jobs, FakePolicy(fn), gpus_per_node=4, restart_delay_s=30, restart_rules=False)
    assert free.preemptions == 8


def test_the_gate_is_the_daemons() -> None:
    # the same rule and messages as daemon/resize.py's judge (tests/daemon/test_resize.py)
    from slurm_rl.core import Intent, JobId, Progress
    j = JobView(id=JobId("1"), partition="gpu", state=JobState.RUNNING, submit_time=0.0,
                start_time=0.0, gpus=1, intent=Intent(gpus_min=1, gpus_max=8, elastic=True),
                progress=Progress(steps_done=1080, steps_total=1100, rate=1.0))
    # 20 s left at 1 GPU; 2 GPUs save 8 s by the generic speed-up curve
    assert restart_gain(j, 2, now=100.0, cost_s=30.0).why == (
        "predicted gain 8s does not beat the restart cost 30s")
    assert restart_gain(j, 2, now=100.0, cost_s=1.0) == Gain(
        seconds=pytest.approx(8.0, abs=0.5))  # type: ignore[arg-type]
    big = replace(j, gpus=4)
    assert restart_gain(big, 1, now=100.0, cost_s=30.0).why == (
        "finishes within the restart cost (20s left)")
    assert restart_gain(replace(j, progress=None), 2, now=100.0, cost_s=1.0).why == (
        "no prediction of its remaining time")


def test_a_resize_that_does_not_fit_does_not_count_against_the_cap() -> None:
    # cap 1: at t=10 the grow to 4 does not fit ("b" holds 3 GPUs); at t=200, after "b" ended,
    # it fits and is made (before the fix the refused try had used up the hour's restart).
    jobs = [elastic("a", 0, 10_000), job("b", 0, 100, 3), job("t1", 10, 1),
            job("t2", 200, 1)]
    ruled = run(jobs, grow_a_at(10, 200), gpus_per_node=4, restart_delay_s=30,
                restart_rules=True, max_restarts_per_hour=1)
    assert (ruled.resizes, ruled.jobs[0].gpus) == (1, 4)
    assert ruled.notes == {"resize does not fit": 1}


def test_by_default_only_jobs_that_opted_in_are_restarted() -> None:
    # The default engine is the daemon: the rigid "r" is never requeued for the waiting job,
    # "o" (opted in at its own count, a trace's elastic column) is.
    def fn(s: ClusterSnapshot) -> Decision:
        r = running(s)
        if s.time == 10.0:
            return Decision(policy="p", preemptions=tuple(
                Preempt(job_id=v.id) for _, v in sorted(r.items())))
        return Decision(policy="p")

    jobs = [job("r", 0, 1000, 2), job("o", 0, 1000, 2, elastic=True), job("t", 10, 1, 2)]
    r = run(jobs, FakePolicy(fn), gpus_per_node=4, **ONE_STEP)
    assert (r.preemptions, {j.job_id: j.restarts for j in r.jobs}) == (
        1, {"r": 0, "o": 1, "t": 0})
    assert r.notes == {"preempt refused by the restart rules: not opted in (--rl-elastic)": 1}


def test_the_opt_in_share_is_drawn_with_the_seed_and_keeps_each_jobs_count() -> None:
    trace = [job(i, float(i), 100.0, 1 + i % 3) for i in range(400)]

    def opted(seed: int, share: float) -> list[str]:
        cfg = EngineConfig(nodes=4, gpus_per_node=4, opt_in_fraction=share, seed=seed)
        jobs, _ = make_jobs(trace, cfg)
        assert all(gpu_range(j, cfg.capacity) is None for j in jobs)  # no GPU range given
        assert [j.gpus for j in jobs] == [t.gpus for t in trace]
        return [j.trace.id for j in jobs if j.intent is not None and j.intent.elastic]

    assert opted(0, 0.0) == []
    assert 160 < len(opted(0, 0.5)) < 240
    assert opted(0, 0.5) == opted(0, 0.5) != opted(1, 0.5)
    assert len(opted(0, 1.0)) == 400
    with pytest.raises(ValueError, match="opt_in_fraction"):
        EngineConfig(nodes=1, gpus_per_node=1, opt_in_fraction=1.5)


def test_simulate_says_how_restarts_were_made() -> None:
    base = ["simulate", "--trace", "data:itp-deadline-cluster02.csv", "--format",
            "itp-deadline", "--window", "0:200", "--policy", "tiresias", "--load", "1.2"]
    runner = CliRunner()
    ruled, opted, free = (runner.invoke(cli_main, [*base, *extra, "--json"]) for extra in (
        [], ["--opt-in-fraction", "0.5"], ["--free-restarts"]))
    assert ruled.exit_code == opted.exit_code == free.exit_code == 0, ruled.output
    r, o, f = (json.loads(x.output) for x in (ruled, opted, free))
    assert r["preemptions"] == 0 < o["preemptions"] and 0 < f["preemptions"]
    # tiresias sees which jobs may be restarted (JobView.restartable) and asks for none
    assert "preempt refused by the restart rules: not opted in (--rl-elastic)" not in r["notes"]
    assert r["restarts"].startswith("restarts as the daemon makes them")
    assert "opt-in share 0.5" in o["restarts"]
    assert f["restarts"].startswith("restarts free")
    text = runner.invoke(cli_main, base)
    assert "restarts as the daemon makes them: jobs that opted in only" in text.output
    both = runner.invoke(cli_main, [*base, "--free-restarts", "--restart-rules", "3"])
    assert both.exit_code == 2
    assert "--free-restarts and --restart-rules exclude each other" in both.output

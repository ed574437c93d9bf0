"""The per-step restart model (EngineConfig.restart_grace_s, requeue_s, restart_delay_s as the
restore step) and the restart model file that sets it (`sim/restart_model.py`,
`slurm-rl simulate --restart-model`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sim_helpers import FREE, ONE_STEP, FakePolicy, by_id, job, run

from slurm_rl.cli import main as cli_main
from slurm_rl.core import ClusterSnapshot, Decision, JobOrder, JobState, Preempt, Resize
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.restart_model import RestartModel, read_restart_model

GRACE, REQUEUE, RESTORE = 5.0, 3.0, 7.0
STEPS = {"restart_grace_s": GRACE, "requeue_s": REQUEUE, "restart_delay_s": RESTORE,
         **FREE}  # the steps of any job's restart (the rules: tests/sim/test_restart_rules.py)


def preempt_a_at(t: float) -> FakePolicy:
    """A fake policy: at `t` (and only then) requeue running job "a"."""
    def fn(s: ClusterSnapshot) -> Decision:
        a = [j for j in s.jobs if j.name == "a" and j.state is JobState.RUNNING]
        if s.time == t and a:
            return Decision(policy="p", preemptions=(Preempt(job_id=a[0].id),))
        return Decision(policy="p")

    return FakePolicy(fn)


def runs_of(result: object, job_id: str) -> list[tuple[float, float]]:
    return [(iv.start, iv.end) for iv in result.intervals  # type: ignore[attr-defined]
            if iv.job_id == job_id]


def test_a_preempted_job_holds_its_gpus_in_grace_frees_them_in_requeue_then_restores() -> None:
    # a (4 GPUs, 100 s) is signalled at 40: it holds the node without progress until 45, the
    # node is free 45..48 (d, then c run there), a may start at 48, restores until 55, and its
    # 60 s left end at 115. Grace progress counted would end it at 110.
    jobs = [job("a", 0, 100, 4), job("d", 40, 1, 4), job("c", 46, 1, 4)]
    r = run(jobs, preempt_a_at(40), tick_s=0, **STEPS)
    assert by_id(r) == {"a": (0, 115), "d": (45, 46), "c": (46, 47)}
    assert runs_of(r, "a") == [(0, 45), (48, 115)]
    assert (r.preemptions, r.jobs[0].restarts) == (1, 1)


def test_the_requeue_gap_leaves_the_gpus_free_and_shows_the_job_pending_and_held() -> None:
    jobs = [job("a", 0, 100, 4), job("d", 40, 1, 1), job("e", 46, 1, 1)]
    policy = preempt_a_at(40)
    r = run(jobs, policy, tick_s=0, **STEPS)
    at = {s.time: s for s in policy.seen}
    # 45: a requeued, d (pending since 40 behind a's held GPUs) starts; 46: a is pending and
    # held (live: requeued with a hold until the daemon releases it), the node has 4 - 1 GPUs
    # free for e; at 48 it is released and may start.
    assert by_id(r)["d"] == (45, 46)
    a46 = [j for j in at[46].jobs if j.name == "a"]
    assert [(j.state, j.held) for j in a46] == [(JobState.PENDING, True)]
    assert by_id(r)["e"] == (46, 47)
    assert runs_of(r, "a") == [(0, 45), (48, 115)]
    assert not [j for s in policy.seen if s.time >= 48 for j in s.jobs
                if j.name == "a" and j.held]


def test_a_signalled_job_is_seen_running_and_a_second_restart_is_ignored() -> None:
    def fn(s: ClusterSnapshot) -> Decision:
        a = [j for j in s.jobs if j.name == "a" and j.state is JobState.RUNNING]
        if a and s.time in (40, 42):
            return Decision(policy="p", preemptions=(Preempt(job_id=a[0].id),))
        return Decision(policy="p")

    jobs = [job("a", 0, 100, 4), job("d", 40, 1, 4), job("f", 42, 1, 4)]
    r = run(jobs, FakePolicy(fn), tick_s=0, **STEPS)
    assert r.preemptions == 1 and r.notes == {"preempt of a job already restarting": 1}
    assert runs_of(r, "a")[0] == (0, 45)


def test_a_resize_in_steps_restarts_at_its_new_count_ahead_of_the_queue() -> None:
    def fn(s: ClusterSnapshot) -> Decision:
        a = [j for j in s.jobs if j.name == "a" and j.state is JobState.RUNNING]
        if s.time == 10 and a:
            return Decision(policy="p", resizes=(Resize(job_id=a[0].id, gpus=2),))
        return Decision(policy="p")

    # a: 100 steps at 1 GPU (resnet50's curve); grown to 2 at 10: 10 steps done, held without
    # progress to 15, GPUs free to 18, runs again at 2 GPUs from 18, restored at 25.
    a = job("a", 0, 100, 1, total_steps=100, model="resnet50", gpus_min=1, gpus_max=2,
            elastic=True)
    r = run([a, job("t", 10, 1, 1)], FakePolicy(fn), gpus_per_node=2, tick_s=0, **STEPS)
    assert r.resizes == 1 and r.jobs[0].gpus == 2
    (first, second) = runs_of(r, "a")
    assert first == (0, 15) and second[0] == 18
    rate2 = 100 / 100 * _speedup(2)
    assert second[1] == pytest.approx(25 + 90 / rate2)


def _speedup(gpus: int) -> float:
    from slurm_rl import perfmodel
    return perfmodel.scaled_rate(1.0, 1, gpus, "resnet50", None)


def test_the_defaults_are_the_measured_steps() -> None:
    """The engine's defaults are the live restart (docs/sim-to-real.md, "What a restart costs,
    step by step"): the daemon's 60 s grace, Slurm's 0.9 s requeue and relaunch as measured on
    the test cluster, and 30 s of restore (a training job's framework start and checkpoint
    read; the measured toy job's 0.06-2.2 s is a lower bound)."""
    cfg = EngineConfig(nodes=1, gpus_per_node=1)
    assert (cfg.restart_grace_s, cfg.requeue_s, cfg.restart_delay_s) == (60.0, 0.9, 30.0)
    assert cfg.restart_cost_s == pytest.approx(90.9)
    # ... under the daemon's rules: only jobs that opted in, at most 2 restarts an hour
    assert (cfg.restart_rules, cfg.max_restarts_per_hour, cfg.opt_in_fraction) == (True, 2, 0.0)
    # a (200 s) is signalled at 40 and holds its GPUs until the requeue at 100; d starts then
    # and ends at 101, a may start at 100.9, starts at 101, restores until 131 and its 160 s
    # left end at 291 (the 40 s done before the signal survive; the grace's 60 s are lost).
    jobs = [job("a", 0, 200, 4, elastic=True), job("d", 40, 1, 4)]
    r = run(jobs, preempt_a_at(40), tick_s=0)
    assert by_id(r) == {"a": (0, 291), "d": (100, 101)}
    assert runs_of(r, "a") == [(0, 100), (101, 291)]


def test_without_grace_and_requeue_a_restart_is_the_single_delay() -> None:
    # The one-step model: a is requeued at 40 and restarts when d ends, after 30 s.
    jobs = [job("a", 0, 100, 4), job("d", 40, 1, 4)]

    def fn(s: ClusterSnapshot) -> Decision:
        pre = preempt_a_at(40).fn
        assert pre is not None
        d = pre(s)
        pend = [j for j in s.jobs if j.name == "d" and j.state is JobState.PENDING]
        order = (JobOrder(job_id=pend[0].id, rank=0),) if pend else ()
        return Decision(policy="p", preemptions=d.preemptions, order=order)

    r = run(jobs, FakePolicy(fn), tick_s=0, **ONE_STEP, **FREE)
    assert EngineConfig(nodes=1, gpus_per_node=1, **ONE_STEP).restart_cost_s == 30.0
    assert by_id(r) == {"a": (0, 41 + 30 + 60), "d": (40, 41)}


@pytest.mark.parametrize("field", ["restart_grace_s", "requeue_s", "restart_delay_s"])
@pytest.mark.parametrize("value", [-1.0, float("inf")])
def test_steps_must_be_finite_and_not_negative(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        EngineConfig(nodes=1, gpus_per_node=1, **{field: value})  # type: ignore[arg-type]


# --- the restart model file ---------------------------------------------------------------------

def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "restart.toml"
    p.write_text(text)
    return p


def test_a_calibration_file_sets_the_three_steps(tmp_path: Path) -> None:
    p = write(tmp_path, "[restart]\ngrace_s = 60\nrequeue_s = 1.2\nrestore_s = 0.1\n\n"
                        "[measured]\nruns = 5\ncheckpoint_s = [0.1, 0.2]\n")
    model = read_restart_model(p)
    assert model == RestartModel(grace_s=60.0, requeue_s=1.2, restore_s=0.1)
    cfg = model.apply(EngineConfig(nodes=1, gpus_per_node=1))
    assert (cfg.restart_grace_s, cfg.requeue_s, cfg.restart_delay_s) == (60.0, 1.2, 0.1)
    # A key left out keeps the default.
    cfg = read_restart_model(write(tmp_path, "[restart]\ngrace_s = 2\n")).apply(cfg)
    assert (cfg.restart_grace_s, cfg.requeue_s, cfg.restart_delay_s) == (2.0, 1.2, 0.1)


@pytest.mark.parametrize(("text", "message"), [
    ("[restart]\ngrace_s = \"ten\"\n",
     "[restart] grace_s: expected seconds >= 0, got a string ('ten')"),
    ("[restart]\nrequeue_s = -1\n", "[restart] requeue_s: expected seconds >= 0, got an integer"),
    ("[restart]\nrestore_s = true\n", "[restart] restore_s: expected seconds >= 0, got a boolean"),
    ("[restart]\ngrace = 1\n",
     "[restart] unknown key(s) grace (valid: grace_s, requeue_s, restore_s)"),
    ("[engine]\nx = 1\n", "unknown key(s) engine (valid tables: restart, measured)"),
    ("[measured]\nruns = 1\n", "needs a [restart] table"),
    ("restart = 3\n", "needs a [restart] table with grace_s, requeue_s, restore_s, got an integer"),
    ("[restart\n", "not TOML"),
])
def test_a_bad_file_is_one_line_naming_the_file_key_and_value(tmp_path: Path, text: str,
                                                            message: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(ValueError) as info:
        read_restart_model(p)
    assert str(info.value).startswith(f"{p}: ") and message in str(info.value)
    assert "\n" not in str(info.value)
    # simulate: a usage error (exit 2), that one line, no traceback, nothing run.
    out = CliRunner().invoke(cli_main, [
        "simulate", "--trace", "data:itp-deadline-cluster02.csv", "--format", "itp-deadline",
        "--window", "0:20", "--policy", "fifo", "--load", "1", "--restart-model", str(p)])
    assert out.exit_code == 2, out.output
    assert message in out.output and "Traceback" not in out.output
    assert "JCT" not in out.output


def test_simulate_with_a_restart_model_equals_the_same_steps_as_options(tmp_path: Path) -> None:
    p = write(tmp_path, "[restart]\ngrace_s = 60\nrequeue_s = 2\nrestore_s = 1\n")
    base = ["simulate", "--trace", "data:itp-deadline-cluster02.csv", "--format",
            "itp-deadline", "--window", "0:300", "--policy", "tiresias", "--load", "1.2",
            "--opt-in-fraction", "0.5", "--json"]
    runner = CliRunner()
    by_file = runner.invoke(cli_main, [*base, "--restart-model", str(p)])
    by_options = runner.invoke(cli_main, [*base, "--restart-grace", "60", "--requeue-time", "2",
                                          "--restart-delay", "1"])
    default = runner.invoke(cli_main, base)
    assert by_file.exit_code == by_options.exit_code == default.exit_code == 0, by_file.output
    a, b, c = (json.loads(x.output) for x in (by_file, by_options, default))
    a.pop("wall_s"), b.pop("wall_s"), c.pop("wall_s")
    assert a == b
    assert a["preemptions"] > 0 and a["avg_jct_s"] != c["avg_jct_s"]
    # An option given overrides the file's value.
    over = runner.invoke(cli_main, [*base, "--restart-model", str(p), "--restart-grace", "60",
                                    "--requeue-time", "0.9", "--restart-delay", "30"])
    d = json.loads(over.output)
    d.pop("wall_s")
    assert d == c

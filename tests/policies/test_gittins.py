"""`gittins` and its table (slurm_rl/policies/gittins_table.py; the builder:
sim/gittins_build.py): the index against hand-worked and closed-form answers, the table's
round trip and rebuild, the policy on hand-built snapshots, and one simulator run on a held-out
trace."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_builders import ids, job, nodes, preempted, running, snap

from slurm_rl import splits
from slurm_rl.core import JobState
from slurm_rl.policies import gittins_table as gt
from slurm_rl.policies import make
from slurm_rl.policies.gittins import Gittins
from slurm_rl.sim import gittins_build as gb

# --- the index ---------------------------------------------------------------------------------


def test_two_point_distributions_by_hand() -> None:
    # {1, 3}: D=1 gives (1/2) / 1, D=3 gives 1 / 2: G(0) = 1/2.
    assert gt.gittins_index([1.0, 3.0], 0.0) == pytest.approx(0.5)
    # {1, 2}: D=1 gives 1/2, D=2 gives 1 / 1.5 = 2/3 (increasing hazard: run to completion).
    assert gt.gittins_index([1.0, 2.0], 0.0) == pytest.approx(2 / 3)
    # {1, 5}: D=1 gives 1/2, D=5 gives 1/3; once past 1, only 5 is left: G(2) = 1/3.
    assert gt.gittins_index([1.0, 5.0], 0.0) == pytest.approx(0.5)
    assert gt.gittins_index([1.0, 5.0], 2.0) == pytest.approx(1 / 3)
    # {1, 1, 10}: D=1 gives (2/3) / 1.
    assert gt.gittins_index([1.0, 1.0, 10.0], 0.0) == pytest.approx(2 / 3)


def test_deterministic_duration_and_past_the_last_sample() -> None:
    assert gt.gittins_index([100.0], 40.0) == pytest.approx(1 / 60)
    assert gt.gittins_index([100.0], 100.0) is None
    assert gt.gittins_index([], 0.0) is None


def _brute(xs: list[float], a: float, deltas: list[float]) -> float:
    alive = [x for x in xs if x > a]
    return max(sum(x - a <= d for x in alive) / sum(min(x - a, d) for x in alive)
               for d in deltas)


@pytest.mark.parametrize("seed", range(5))
def test_one_pass_equals_the_definition(seed: int) -> None:
    import random

    rng = random.Random(seed)
    xs = sorted(rng.choice([rng.uniform(1, 50), float(rng.randint(1, 5))]) for _ in range(12))
    for a in (0.0, 1.0, 2.5, xs[5]):
        support = [x - a for x in xs if x > a]
        others = [rng.uniform(0.01, 60) for _ in range(200)]
        fast = gt.gittins_index(xs, a)
        assert fast == pytest.approx(_brute(xs, a, support))
        assert fast is not None and _brute(xs, a, others) <= fast * (1 + 1e-12)


def _quantiles(inverse_cdf: object, n: int) -> list[float]:
    return sorted(inverse_cdf((i + 0.5) / n) for i in range(n))  # type: ignore[operator]


def test_memoryless_distribution_has_a_flat_index() -> None:
    # Exponential, mean 100 s: P(S - a <= D | S > a) / E[min(S - a, D) | S > a] = 1/100 for
    # every D, so G(a) = 1/100 at every a (with a quantum: D -> 0 over a sample would blow up).
    xs = _quantiles(lambda u: -100.0 * math.log(1 - u), 20_000)
    for a in (0.0, 50.0, 100.0, 200.0):
        assert gt.gittins_index(xs, a, quantum=5.0) == pytest.approx(0.01, rel=0.05)


def test_without_a_quantum_an_empirical_index_spikes_before_a_sample() -> None:
    xs = [10.0, 20.0, 30.0]
    assert gt.gittins_index(xs, 9.999) == pytest.approx(1 / (3 * 0.001), rel=0.01)
    # with a 5 s quantum: 1 of 3 finishes within D = 5, the others are served 5 s each
    assert gt.gittins_index(xs, 9.999, quantum=5.0) == pytest.approx(1 / (0.001 + 10), rel=1e-6)


def test_decreasing_hazard_index_is_the_hazard_and_falls() -> None:
    # Pareto(alpha=1.5, scale 1): hazard 1.5 / a, decreasing; the Gittins index of a DHR
    # distribution is its hazard rate.
    xs = _quantiles(lambda u: (1 - u) ** (-1 / 1.5), 20_000)
    at = [2.0, 4.0, 8.0, 16.0]
    g = [gt.gittins_index(xs, a, quantum=0.05) for a in at]
    for a, ga in zip(at, g, strict=True):
        assert ga == pytest.approx(1.5 / a, rel=0.1)
    assert g == sorted(g, reverse=True)  # type: ignore[type-var]


def test_increasing_hazard_index_is_one_over_mean_residual_and_rises() -> None:
    xs = _quantiles(lambda u: 100.0 * u, 2_000)  # uniform on [0, 100]: IHR
    at = [0.0, 20.0, 50.0, 80.0]
    g = [gt.gittins_index(xs, a, quantum=1.0) for a in at]
    for a, ga in zip(at, g, strict=True):
        assert ga == pytest.approx(2 / (100 - a), rel=0.02)
    assert g == sorted(g)  # type: ignore[type-var]


# --- the table ---------------------------------------------------------------------------------


def _durations() -> dict[int, list[float]]:
    return {g: [100.0 * g, 1000.0, 5000.0 + g, 20_000.0] for g in (1, 2, 4, 8, 16, 64)}


def test_buckets_and_step_lookup() -> None:
    t = gt.build(_durations(), points=20, min_survivors=1)
    assert [c.label for c in t.curves] == ["1", "2", "3-4", "5-8", "9-16", "17+"]
    assert t.lookup(3, 0.0)[1] == "3-4" and t.lookup(64, 0.0)[1] == "17+"
    c = t.curve_for(8)
    assert c.attained[0] == 0.0 and c.attained[-1] == 20_000.0 and len(c.attained) == 20
    mid = (c.attained[5] + c.attained[6]) / 2
    assert c.at(mid) == c.index[5] and c.at(c.attained[6]) == c.index[6]
    assert c.at(1e9) == c.index[-1]


def test_sparse_tail_takes_the_lowest_index() -> None:
    c = gt.curve(1, 1, [10.0, 20.0, 30.0, 1000.0], points=30, min_survivors=2)
    trusted = [g for g, s in zip(c.index, c.survivors, strict=True) if s >= 2]
    assert all(g == min(trusted) for g, s in zip(c.index, c.survivors, strict=True) if s < 2)
    assert c.survivors[-1] == 0


def test_round_trip_is_exact(tmp_path: Path) -> None:
    t = gt.build(_durations(), header=("made by a test",), points=30, min_survivors=1)
    text = gt.dumps(t)
    assert gt.loads(text) == t
    assert gt.dumps(gt.loads(text)) == text
    p = tmp_path / "t.csv"
    p.write_text(text)
    assert gt.read(p) == t


def test_bad_tables_are_refused() -> None:
    with pytest.raises(ValueError, match="expected columns"):
        gt.loads("a,b\n")
    header = ",".join(gt.COLUMNS)
    with pytest.raises(ValueError, match="bad row"):
        gt.loads(f"{header}\n1,1,1,3,x,0.1,3\n")
    with pytest.raises(ValueError, match="positive index"):
        gt.loads(f"{header}\n1,1,1,3,0.0,0.0,3\n")


def test_shipped_table_is_what_the_command_builds(tmp_path: Path) -> None:
    """The builder is deterministic and the shipped file is current: rebuilding from the
    training clusters (never a held-out one) gives the shipped bytes."""
    out = tmp_path / "a.csv"
    r = CliRunner().invoke(gb.build_command, ["--out", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text() == gt.shipped_path().read_text()
    assert gt.dumps(gb.from_traces(splits.TRAINING_TRACES)) == out.read_text()
    text = out.read_text()
    assert "Built by: slurm-rl gittins-table build --traces data:itp-deadline-cluster01" in text
    assert not any(f"cluster{c}" in text for c in splits.HELD_OUT)
    assert not set(splits.TRAINING) & set(splits.HELD_OUT)


def test_shipped_table_has_enough_samples_per_bucket() -> None:
    t = gt.shipped()
    assert [c.label for c in t.curves] == ["1", "2", "3-4", "5-8", "9-16", "17+"]
    assert min(c.samples for c in t.curves) >= 100
    assert all(len(c.attained) == gt.POINTS and min(c.index) > 0 for c in t.curves)


def test_building_from_a_held_out_trace_warns(tmp_path: Path) -> None:
    r = CliRunner().invoke(gb.build_command, [
        "--traces", "data:itp-deadline-cluster10.csv", "--points", "5",
        "--out", str(tmp_path / "x.csv")])
    assert "held-out" in r.output or "held-out" in (r.stderr if r.stderr_bytes else "")


# --- the policy --------------------------------------------------------------------------------


@pytest.fixture
def table(tmp_path: Path) -> str:
    """Every bucket: half the jobs 100 s, half 10,000 s. G(0) = 1/200 (D = 100); once past
    100 s, G(a) = 1 / (10,000 - a)."""
    t = gt.build({g: [100.0, 10_000.0] for g in (1, 2, 4, 8, 16, 64)}, points=60,
                 min_survivors=1, quantum=0.0)
    p = tmp_path / "table.csv"
    p.write_text(gt.dumps(t))
    return str(p)


def test_orders_by_index_per_gpu_with_reasons(table: str) -> None:
    s = snap(job("wide", gpus=4, submit=1),            # 1/200 / 4
             job("old", gpus=1, submit=2, attained_gpu_s=500.0),  # ~1/9500
             job("new", gpus=1, submit=3),             # 1/200
             job("new2", gpus=1, submit=4),
             nodes=nodes(4))
    d = make("gittins", table=table).decide(s)
    assert ids(d) == ["new", "new2", "wide", "old"]
    why = {str(o.job_id): o.reason for o in d.order}
    assert why["new"].startswith("gittins index 0.005/s at attained 0 s (bucket 1)")
    assert "(bucket 3-4)" in why["wide"] and "at attained 500 s" in why["old"]


def test_attained_time_is_per_gpu_less_restart_costs(table: str) -> None:
    p = make("gittins", table=table, restart_cost_s=30.0)
    j = job("j", gpus=4, attained_gpu_s=4 * 1000.0, restarts=3)
    assert p.attained_s(j) == pytest.approx(1000.0 - 90.0)  # type: ignore[attr-defined]
    assert p.attained_s(job("k", gpus=2, attained_gpu_s=10.0, restarts=1)) == 0.0  # type: ignore[attr-defined]


def test_preempts_a_job_of_much_lower_index_only(table: str) -> None:
    s = snap(running("long", gpus=4, attained_gpu_s=4 * 1000.0),  # 1/9000 / 4
             job("p", gpus=1), nodes=nodes(4))                     # 1/200
    d = make("gittins", table=table).decide(s)
    assert preempted(d) == ["long"]
    assert "gittins: priority" in d.preemptions[0].reason
    # near its end the running job's index is higher: p preempts it only if its priority is
    # more than (1 + margin) times the running job's
    long, p = running("long", gpus=4, attained_gpu_s=4 * 9500.0), job("p", gpus=1)
    late = snap(long, p, nodes=nodes(4))
    pol = make("gittins", table=table)
    ratio = pol.priority(p)[0] / pol.priority(long)[0]  # type: ignore[attr-defined]
    assert 2 < ratio < 100
    assert preempted(make("gittins", table=table, margin=ratio - 1.1).decide(late)) == ["long"]
    assert not make("gittins", table=table, margin=ratio - 0.9).decide(late).preemptions


def test_no_preemption_when_it_fits_or_for_held_unmanaged_or_completing(table: str) -> None:
    fits = snap(running("long", gpus=2, attained_gpu_s=2 * 1000.0), job("p", gpus=2),
                nodes=nodes(2))
    assert not make("gittins", table=table).decide(fits).preemptions
    for r in (running("long", gpus=4, attained_gpu_s=4000.0, managed=False),
              job("long", state=JobState.COMPLETING, gpus=4, attained_gpu_s=4000.0,
                  start=0.0)):
        assert not make("gittins", table=table).decide(
            snap(r, job("p", gpus=1), nodes=nodes(4))).preemptions
    held = snap(running("long", gpus=4, attained_gpu_s=4000.0), job("p", gpus=1, held=True),
                nodes=nodes(4))
    assert not make("gittins", table=table).decide(held).preemptions


def test_options_are_checked(table: str) -> None:
    with pytest.raises(ValueError, match="margin"):
        make("gittins", margin=-1.0)
    with pytest.raises(ValueError, match="unknown option"):
        make("gittins", thresholds=[1])
    assert make("gittins").decide(snap(job("a"), nodes=nodes(0))).order[0].reason.startswith(
        "gittins index ")


# --- in the simulator, on a held-out trace -------------------------------------------------------


def test_beats_fifo_on_a_held_out_window() -> None:
    from slurm_rl.sim.config import EngineConfig
    from slurm_rl.sim.run import Sizing, load_jobs, resolve_trace_path, simulate

    jobs = load_jobs(resolve_trace_path("data:itp-deadline-cluster10.csv"), "itp-deadline")
    jct = {}
    # free restarts and one-step restarts, as docs/policies.md's table was run
    engine = EngineConfig(nodes=1, gpus_per_node=4, restart_rules=False, restart_grace_s=0.0,
                          requeue_s=0.0)
    for name in ("fifo", "gittins"):
        r = simulate(jobs, name, Sizing(gpus_per_node=4, load=1.0), engine=engine)
        jct[name] = sum(j.end - j.submit for j in r.jobs) / len(r.jobs)
    # docs/policies.md (gittins): 17.4 h against 19.3 h
    assert jct["gittins"] < 0.95 * jct["fifo"], jct


@settings(max_examples=300, deadline=None)
@given(gpus=st.integers(0, 80), attained=st.floats(0.0, 1e9), restarts=st.integers(0, 5),
       cost=st.sampled_from([0.0, 30.0, 600.0]),
       state=st.sampled_from([JobState.RUNNING, JobState.PENDING]))
def test_index_of_is_the_priority_the_same_float(gpus: int, attained: float, restarts: int,
                                                 cost: float, state: JobState) -> None:
    """`index_of` (the guard's ranking) is `priority(job)[0]` to the last bit, on every
    curve of the shipped table, with lost restart time and jobs that have run nothing."""
    policy = Gittins(restart_cost_s=cost)
    v = job("j", state=state, gpus=gpus, attained_gpu_s=attained, restarts=restarts)
    assert policy.index_of(v) == policy.priority(v)[0]

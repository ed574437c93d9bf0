"""inference/exact.py: the exact optimum is of the simulator's own problem (brute force over
every plan replayed through the simulator, the optimal plan replayed, no scheduler below it),
by both the dynamic program and the HiGHS MILP."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_rl.inference import cluster as cl
from slurm_rl.inference import exact
from slurm_rl.inference.profile import Layer, Profile, resolve
from slurm_rl.inference.schedulers import (
    EarliestFinish,
    Lookahead,
    RandomFeasible,
    WholeModel,
    metrics,
    run_episode,
)
from slurm_rl.inference.sim import InferenceSim, StreamConfig

needs_highspy = pytest.mark.skipif(
    importlib.util.find_spec("highspy") is None,
    reason="highspy is not installed (the [exact] extra; `make dev` installs it)")

# (devices, Gbit/s, model, cuts, tasks, load, seed): a chain on two equal devices, a DAG with a
# skip edge on two unequal ones, and a fork-and-join DAG on three; in the first two HEFT is
# measurably above the optimum, so agreement is not agreement on a trivial plan.
TINY = (
    (("a100", "a100"), 10.0, "vgg", (0, 7, 14), 3, 0.6, 2),
    (("a100", "t4"), 30.0, "bert", (0, 2, 5), 3, 0.6, 4),
    (("v100", "t4", "cpu"), 1.0, "resnet", (0, 18, 23, 25), 2, 0.9, 0),
)


def _instance(case: tuple) -> tuple[cl.Cluster, list, StreamConfig]:
    types, gbps, model, cuts, tasks, load, seed = case
    prof = exact.coarsen(resolve(model), cuts)
    return (cl.make(list(types), gbps), [prof],
            StreamConfig(tasks=tasks, load=load, noise=0.0, seed=seed))


def _replay(c: cl.Cluster, profs: list, cfg: StreamConfig, plan: exact.Plan) -> float:
    sim = InferenceSim(c, profs, cfg)
    recs = run_episode(sim, exact.FixedPlan(plan))
    assert sim.dropped == 0
    return metrics(recs).mean_s


@pytest.fixture(scope="module", params=range(len(TINY)), ids=["chain", "skip-dag", "fork-dag"])
def brute(request: pytest.FixtureRequest) -> tuple:
    """An instance, its stream, and the minimum over every plan replayed through the
    simulator (with every plan's `evaluate` checked against its replay)."""
    c, profs, cfg = _instance(TINY[request.param])
    s = exact.stream(c, profs, cfg)
    sizes = [len(s.layers(k)) for k in range(len(s.arrivals))]
    best, best_plan = float("inf"), None
    for flat in itertools.product(range(c.n), repeat=sum(sizes)):
        plan = exact._split(flat, sizes)
        sim_mean = _replay(c, profs, cfg, plan)
        assert exact.mean_latency(s, plan) == pytest.approx(sim_mean, rel=1e-12, abs=0)
        if sim_mean < best:
            best, best_plan = sim_mean, plan
    return c, profs, cfg, s, best, best_plan


def test_dynamic_program_matches_brute_force_over_the_simulator(brute: tuple) -> None:
    c, profs, cfg, s, best, _ = brute
    opt = exact.optimum(s)
    assert opt.mean_s == pytest.approx(best, rel=1e-12, abs=0)
    assert exact.brute_force(s)[0] == pytest.approx(best, rel=1e-12, abs=0)
    # the optimal plan replayed through the simulator gives the optimum's latency
    assert _replay(c, profs, cfg, opt.plan) == pytest.approx(opt.mean_s, rel=1e-9, abs=0)


@needs_highspy
def test_milp_matches_brute_force_over_the_simulator(brute: tuple) -> None:
    c, profs, cfg, s, best, _ = brute
    sol = exact.solve(s, time_limit=20.0)
    assert sol.optimal and sol.status == "Optimal"
    assert sol.mean_s == pytest.approx(best, rel=1e-12, abs=0)
    assert sol.milp_mean_s == pytest.approx(best, rel=1e-6)  # the solver's own tolerance
    assert sol.bound_s <= sol.mean_s
    assert _replay(c, profs, cfg, sol.plan) == pytest.approx(sol.mean_s, rel=1e-9, abs=0)


def test_no_scheduler_beats_the_optimum_and_heft_is_above_it(brute: tuple) -> None:
    c, profs, cfg, s, best, _ = brute
    ratios = {}
    for sch in (EarliestFinish(), Lookahead(), WholeModel(), RandomFeasible(1),
                RandomFeasible(2)):
        sim = InferenceSim(c, profs, cfg)
        ratios[sch.name + str(id(sch))] = metrics(run_episode(sim, sch)).mean_s / best
    assert min(ratios.values()) >= 1 - 1e-12
    if cfg.tasks == 3:  # the two instances picked for a heft above the optimum
        heft = next(v for k, v in ratios.items() if k.startswith("heft"))
        assert heft > 1.01


def test_the_stream_is_the_simulators() -> None:
    c, profs, cfg = _instance(TINY[1])
    s = exact.stream(c, profs, cfg)
    sim = InferenceSim(c, profs, cfg)
    recs = run_episode(sim, EarliestFinish())
    assert s.arrivals == tuple(r.arrival for r in sorted(recs, key=lambda r: r.task))
    plan = tuple(r.devices for r in sorted(recs, key=lambda r: r.task))
    assert exact.evaluate(s, plan) == tuple(r.latency for r in sorted(recs,
                                                                       key=lambda r: r.task))


def test_instances_outside_the_exact_model_are_refused() -> None:
    c, profs, cfg = _instance(TINY[0])
    with pytest.raises(exact.InstanceError, match="noise"):
        exact.stream(c, profs, StreamConfig(tasks=3, noise=0.1))
    small = cl.Cluster(devices=tuple(cl.Device(name=f"d{k}", flops_per_s=1e12,
                                               mem_bytes_per_s=1e11, memory_bytes=1e8)
                                     for k in range(2)),
                       bandwidth=cl.uniform_bandwidth(2, 10.0))
    with pytest.raises(exact.InstanceError, match="memory could bind"):
        exact.stream(small, profs, StreamConfig(tasks=3, noise=0.0))
    with pytest.raises(exact.InstanceError, match="more than the limit"):
        exact.brute_force(exact.stream(c, profs, cfg), limit=10)


def test_coarsen_keeps_the_structure() -> None:
    vgg = exact.coarsen(resolve("vgg"), (0, 7, 14, 21))
    assert vgg.is_chain and len(vgg.layers) == 4
    assert vgg.total_flops == pytest.approx(resolve("vgg").total_flops)
    res = exact.coarsen(resolve("resnet"), (0, 18, 23, 25, 50))
    assert [lay.inputs for lay in res.layers] == [(-1,), (0,), (0,), (1, 2), (3,)]
    bert = exact.coarsen(resolve("bert"), (0, 2, 5, 22))
    assert [lay.inputs for lay in bert.layers] == [(-1,), (0,), (0, 1), (2,)]
    with pytest.raises(ValueError, match="cuts"):
        exact.coarsen(resolve("vgg"), (1, 7))


@st.composite
def _tiny_worlds(draw: st.DrawFn) -> tuple[cl.Cluster, list, StreamConfig]:
    """2-3 devices of random speeds and links, 1-3 tasks of a random DAG of 1-3 layers."""
    n = draw(st.integers(2, 3))
    devs = tuple(cl.Device(name=f"d{k}", flops_per_s=10.0 ** draw(st.integers(10, 13)),
                           mem_bytes_per_s=10.0 ** draw(st.integers(10, 12)),
                           memory_bytes=1e12, overhead_s=1e-5) for k in range(n))
    bw = np.array([[draw(st.floats(0.5, 100.0)) * cl.GBPS for _ in range(n)] for _ in range(n)])
    np.fill_diagonal(bw, np.inf)
    c = cl.Cluster(devices=devs, bandwidth=bw, source=draw(st.integers(0, n - 1)),
                   link_latency_s=draw(st.sampled_from([0.0, 1e-4])))
    layers: list[Layer] = []
    for i in range(draw(st.integers(1, 3))):
        inputs = tuple(sorted(set(draw(st.lists(st.integers(-1, i - 1), min_size=1,
                                                max_size=2)))))
        layers.append(Layer(name=f"l{i}", kind="X", flops=float(draw(st.integers(0, 10**10))),
                            param_bytes=1e6, out_bytes=float(draw(st.integers(1, 10**7))),
                            inputs=inputs, in_bytes=1e5))
    prof = Profile(model="m", input_bytes=1e5, layers=tuple(layers))
    tasks = draw(st.integers(1, 3 if len(layers) <= 2 else 2))
    return c, [prof], StreamConfig(tasks=tasks, load=draw(st.floats(0.2, 2.0)), noise=0.0,
                                   seed=draw(st.integers(0, 1000)))


@settings(max_examples=25, deadline=None)
@given(_tiny_worlds(), st.integers(0, 2**31))
def test_optimum_is_the_brute_force_minimum_and_evaluate_is_the_simulator(
        world: tuple, plan_seed: int) -> None:
    c, profs, cfg = world
    s = exact.stream(c, profs, cfg)
    best, _ = exact.brute_force(s)
    assert exact.optimum(s).mean_s == pytest.approx(best, rel=1e-12, abs=0)
    rng = np.random.default_rng(plan_seed)
    plan = tuple(tuple(int(d) for d in rng.integers(c.n, size=len(s.layers(k))))
                 for k in range(len(s.arrivals)))
    assert exact.mean_latency(s, plan) == pytest.approx(_replay(c, profs, cfg, plan),
                                                        rel=1e-12, abs=0)
    assert exact.mean_latency(s, plan) >= best * (1 - 1e-12)

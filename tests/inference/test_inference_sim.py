"""inference/sim.py and schedulers.py: the simulator's invariants, matching, the DP bound."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_rl.inference import cluster as cl
from slurm_rl.inference import schedulers as sch
from slurm_rl.inference.profile import Layer, Profile, resolve
from slurm_rl.inference.sim import InferenceSim, PlacementError, StreamConfig


def _profile(draw: st.DrawFn, name: str) -> Profile:
    n = draw(st.integers(1, 8))
    layers: list[Layer] = []
    for i in range(n):
        inputs = tuple(sorted(set(draw(st.lists(st.integers(-1, i - 1), min_size=1,
                                                max_size=2)))))
        out = float(draw(st.integers(1, 10**7)))
        in_bytes = sum(100.0 if j < 0 else layers[j].out_bytes for j in inputs)
        layers.append(Layer(name=f"l{i}", kind="X", flops=float(draw(st.integers(0, 10**10))),
                            param_bytes=float(draw(st.integers(0, 10**8))), out_bytes=out,
                            inputs=inputs, in_bytes=in_bytes))
    return Profile(model=name, input_bytes=100.0, layers=tuple(layers))


@st.composite
def worlds(draw: st.DrawFn) -> tuple[cl.Cluster, list[Profile], StreamConfig, int]:
    n = draw(st.integers(1, 5))
    devs = tuple(cl.Device(name=f"d{k}", flops_per_s=10.0 ** draw(st.integers(9, 13)),
                           mem_bytes_per_s=10.0 ** draw(st.integers(9, 12)),
                           memory_bytes=float(draw(st.integers(10**6, 4 * 10**8))),
                           overhead_s=1e-5) for k in range(n))
    bw = np.array([[draw(st.floats(0.1, 100.0)) * cl.GBPS for _ in range(n)] for _ in range(n)])
    np.fill_diagonal(bw, np.inf)
    c = cl.Cluster(devices=devs, bandwidth=bw, source=draw(st.integers(0, n - 1)))
    profs = [_profile(draw, f"m{k}") for k in range(draw(st.integers(1, 3)))]
    cfg = StreamConfig(tasks=draw(st.integers(1, 12)), load=draw(st.floats(0.1, 3.0)),
                       noise=draw(st.sampled_from([0.0, 0.3])), seed=draw(st.integers(0, 99)))
    return c, profs, cfg, draw(st.integers(0, 3))


@settings(max_examples=60, deadline=None)
@given(worlds())
def test_no_layer_is_placed_without_memory(world: tuple[cl.Cluster, list[Profile],
                                                        StreamConfig, int]) -> None:
    c, profs, cfg, which = world
    sim = InferenceSim(c, profs, cfg)
    options: list[sch.Scheduler] = [sch.EarliestFinish(), sch.WholeModel(),
                                    sch.RandomFeasible(cfg.seed), sch.Lookahead()]
    scheduler = options[which]
    memory = c.arrays()[2]
    placed: list[tuple[int, int, float]] = []  # (task, device, bytes)
    while not sim.done:
        if not sim.options().feasible.any():
            sim.drop()
            continue
        d = scheduler.choose(sim)
        task, need = sim.task, sim.task.t.need[sim.layer]
        # independent bookkeeping: what unfinished tasks (and this one) hold on d
        released = {r.task for r in sim.records}  # finished by now: they hold nothing
        holding = sum(b for t, dev, b in placed
                      if dev == d and (t == task.idx or t not in released
                                       and _finish(sim, t) > task.arrival))
        assert holding + need <= memory[d] * (1 + 1e-12)
        sim.place(d)
        placed.append((task.idx, d, need))
        assert (sim.used <= memory * (1 + 1e-12)).all()
    assert len(sim.records) + sim.dropped == cfg.tasks
    for r in sim.records:
        assert r.finish >= r.arrival
        assert sum(r.shares) == pytest.approx(r.latency, rel=1e-9, abs=1e-12)


def _finish(sim: InferenceSim, task: int) -> float:
    for r in sim.records:
        if r.task == task:
            return r.finish
    for t in sim.pending:
        if t.idx == task:
            return max(t.act_fin)
    return np.inf if task == sim.task.idx else -np.inf  # dropped: freed at once


def test_infeasible_device_is_refused() -> None:
    c = cl.make(["t4", "t4"], 10)
    small = cl.Cluster(devices=(c.devices[0], cl.Device(name="tiny", flops_per_s=1e12,
                                                        mem_bytes_per_s=1e11, memory_bytes=10)),
                       bandwidth=c.bandwidth)
    sim = InferenceSim(small, [resolve("vgg")], StreamConfig(tasks=1))
    assert list(sim.options().feasible) == [True, False]
    with pytest.raises(PlacementError, match="not enough memory"):
        sim.place(1)


def test_same_stream_for_every_scheduler_and_queueing() -> None:
    c = cl.make(["t4"], 10)
    cfg = StreamConfig(tasks=10, load=2.0, seed=3)
    a = sch.run_episode(InferenceSim(c, [resolve("vgg")], cfg), sch.EarliestFinish())
    b = sch.run_episode(InferenceSim(c, [resolve("vgg")], cfg), sch.WholeModel())
    assert [r.arrival for r in a] == [r.arrival for r in b]
    assert [r.latency for r in a] == [r.latency for r in b]  # one device: same placement
    ref = a[0].ref_s
    assert max(r.latency for r in a) > 2 * ref  # at load 2 tasks queue behind each other


def test_lookahead_sees_the_rest_of_the_model_where_heft_does_not() -> None:
    # one VGG alone on a T4 (the source) and an A100 at 10 Gbit/s: HEFT starts on the T4
    # (no input transfer) and moves later, paying a larger transfer; the lookahead ships
    # the input to the A100 at once, which is the DP optimum
    c, prof = cl.make(["t4", "a100"], 10), resolve("vgg")
    cfg = StreamConfig(tasks=1, noise=0.0)
    heft = sch.run_episode(InferenceSim(c, [prof], cfg), sch.EarliestFinish())[0]
    look = sch.run_episode(InferenceSim(c, [prof], cfg), sch.Lookahead())[0]
    assert set(look.devices) == {1} and len(set(heft.devices)) == 2
    assert look.latency == pytest.approx(sch.dp_chain(prof, c)[0])
    assert look.latency < 0.7 * heft.latency


def _brute(profile: Profile, c: cl.Cluster) -> float:
    best = np.inf
    t = c.compute_times(profile)
    inv = 1.0 / c.bandwidth
    for path in itertools.product(range(c.n), repeat=len(profile.layers)):
        total = profile.input_bytes * inv[c.source, path[0]] + t[0, path[0]]
        for i in range(1, len(path)):
            total += profile.layers[i - 1].out_bytes * inv[path[i - 1], path[i]] + t[i, path[i]]
        best = min(best, total)
    return float(best)


def test_dp_is_exact_on_small_chains_and_matches_the_simulator() -> None:
    full = resolve("vgg")
    chain = Profile(model="v", input_bytes=full.input_bytes, layers=full.layers[:6])
    for mix in (["t4", "cpu", "a100"], ["cpu", "cpu", "t4"]):
        for gbps in (1.0, 100.0):
            c = cl.make(mix, gbps)
            best, path = sch.dp_chain(chain, c)
            assert best == pytest.approx(_brute(chain, c), rel=1e-12)
            sim = InferenceSim(c, [chain], StreamConfig(tasks=1, noise=0.0))
            for d in path:
                sim.place(d)
            assert sim.records[0].latency == pytest.approx(best, rel=1e-9)
    with pytest.raises(ValueError, match="not a chain"):
        sch.dp_chain(resolve("resnet"), cl.make(["t4"], 1))

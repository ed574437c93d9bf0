"""The exact offline optimum of a small inference stream, as the simulator scores it (pure):
`optimum` by dynamic programming (numpy only), `solve` by a MILP that HiGHS solves (`highspy`,
the `[exact]` extra, imported only there), `brute_force` by enumeration; `FixedPlan` replays a
plan through the simulator. docs/inference.md, "Against the exact optimum".

The problem is the one `InferenceSim` (sim.py) poses with `noise = 0`, read from its code:

- **Stream.** Task 0 arrives at t = 0, task k + 1 an exponential gap (rate `load` x the sum
  over devices of 1 / the mean whole-model time there) after task k, its model drawn from the
  mix, both from the generator seeded `[seed, 0]` and consumed only by arrivals: the stream is
  the same whatever a scheduler does. `stream` reads it off a simulator run.
- **Decisions.** All layers of task k are placed at its arrival, one at a time in the
  profile's (topological) order, before task k + 1 arrives: the placement order is fixed,
  (task, layer) lexicographic; a scheduler chooses only a device per layer.
- **Devices.** A device runs one layer at a time, non-preemptively, in the order the layers
  were placed on it: a layer starts at `max(ready, finish of the layer placed on the device
  before it)` (`act_free` is that finish, overwritten at every placement). There is no
  backfilling: a later layer never uses an idle gap before an earlier-placed one, even when
  that one is waiting for its input. A layer takes `comp[layer, device]` seconds (the
  roofline or measured times, cluster.py), which with noise 0 is also what it actually takes.
- **Transfers.** A layer is ready at `max(arrival, max over its inputs of (producer's finish +
  bytes / bandwidth[from, to] + link latency))`, where the model's input comes from device
  `source` at the arrival, and a transfer within one device costs 0. Transfers do not
  contend: links have no queue, a device sends and receives any number of tensors at once,
  and a transfer occupies neither end's compute.
- **Memory.** A layer may go to a device only if the weights and outputs of every unfinished
  task's layers placed there, plus its own, fit (released at the first arrival after the task
  finished); with no feasible device the task is dropped. `stream` accepts only instances
  where every layer of every task fits on every device at once, so memory never binds, no
  task is dropped, and every assignment is feasible.
- **Score.** A task's latency is its last layer's finish (the max over its layers) minus its
  arrival; a scheduler is scored by the mean over the tasks.

So every schedule the simulator can realise is fixed by an assignment x (a device per layer
of each task): each device's sequence is the placement order restricted to it, and each layer
starts as early as that sequence and its inputs allow (`evaluate` computes it with the
simulator's arithmetic). The optimum here is the minimum over **all assignments** of that
mean latency. No order is chosen (the simulator realises only one), and it is the earliest-
start schedule of each assignment because finishes only grow when a start is delayed. Every
scheduler run on the simulator with noise 0 realises one of these assignments, whatever it
knows, so its mean latency is >= this optimum; the optimum itself is offline (it knows every
arrival in advance). An optimum that could reorder a device's queue or fill its idle gaps
would be lower, and not reachable by any scheduler on this simulator.

The dynamic program (`optimum`) is described at the function. The MILP (`solve`): binaries
x[g, d] (layer g on device d), starts S[g] >= the task's arrival, finishes
F[g] = S[g] + sum_d comp[g, d] x[g, d], task ends C[k] >= F[g]; for each input edge j -> g
and devices (d', d): S[g] >= F[j] + c[d', d] (x[j, d'] + x[g, d] - 1), with c the transfer
time (the model's input likewise from `source`); for each pair p before q in the placement
order and each device d: S[q] >= F[p] - M_pq (2 - x[p, d] - x[q, d]). Objective:
sum_k C[k] - arrival[k]. M_pq is valid because an optimal earliest-start schedule has each
latency at most the incumbent's total minus the other tasks' lower bounds (each task's
latency alone on the idle cluster, by enumeration), and that cap is a constraint; a pair
whose first task must have finished before the second arrives needs no constraint. Times are
in units of the fastest model's reference time, so HiGHS's tolerances are relative to the
instance.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_rl.inference.cluster import F64, Cluster
from slurm_rl.inference.profile import Layer, Profile
from slurm_rl.inference.sim import InferenceSim, ModelTables, StreamConfig

Plan = tuple[tuple[int, ...], ...]
"""plan[k][i]: the device of layer i of task k."""


class InstanceError(ValueError):
    """An instance outside what the exact model covers (noise, memory, size)."""


@dataclass(frozen=True, kw_only=True)
class Stream:
    """A task stream exactly as the simulator realises it with noise 0."""

    arrivals: tuple[float, ...]
    models: tuple[int, ...]
    """Index into `tables` of each task's model."""
    tables: tuple[ModelTables, ...]
    """The simulator's own tables (compute times, output bytes) per model."""
    inv_bw: F64
    """(n, n) seconds per byte; 0 on the diagonal."""
    lat: F64
    """(n, n) seconds per transfer on top of bytes / bandwidth; 0 on the diagonal."""
    source: int
    n: int

    def layers(self, k: int) -> tuple[Layer, ...]:
        return self.tables[self.models[k]].profile.layers

    def transfer(self, k: int, j: int, src: int, dst: int) -> float:
        """Seconds to move the input `j` (-1: the model's input) of task k's layer from
        device `src` to `dst` (for j = -1, `src` is ignored: it is the source device)."""
        t = self.tables[self.models[k]]
        if j < 0:
            b, src = t.profile.input_bytes, self.source
        else:
            b = float(t.out_bytes[j])
        return float(b * self.inv_bw[src, dst] + self.lat[src, dst])


def stream(cluster: Cluster, profiles: Sequence[Profile], cfg: StreamConfig,
           mix: Sequence[float] | None = None) -> Stream:
    """The stream `InferenceSim(cluster, profiles, cfg, mix)` produces, read off a run of it;
    InstanceError if `cfg.noise` is not 0 or memory could ever bind."""
    if cfg.noise != 0:
        raise InstanceError(f"noise: {cfg.noise}; the exact model is the noise-0 simulator")
    sim = InferenceSim(cluster, profiles, cfg, mix)
    arrivals: list[float] = []
    models: list[int] = []
    while not sim.done:
        if sim.layer == 0:
            arrivals.append(sim.task.arrival)
            models.append(next(m for m, t in enumerate(sim.models) if t is sim.task.t))
        feasible = sim.options().feasible
        if not feasible.any():
            raise InstanceError(f"task {sim.task.idx}: no device has memory for layer "
                                f"{sim.layer}: memory could bind")
        sim.place(int(np.argmax(feasible)))
    need = sum(float(sim.models[m].need.sum()) for m in models)
    if need > float(sim.memory.min()):
        raise InstanceError(f"the stream's layers need {need:.3g} bytes, more than the smallest "
                            f"device's {float(sim.memory.min()):.3g}: memory could bind")
    return Stream(arrivals=tuple(arrivals), models=tuple(models), tables=tuple(sim.models),
                  inv_bw=sim.inv_bw, lat=sim.lat, source=cluster.source, n=cluster.n)


def schedule(s: Stream, plan: Plan) -> tuple[tuple[tuple[float, float], ...], ...]:
    """(start, finish) of every layer of every task under `plan`: the earliest-start schedule
    with every device's layers in placement order, in the simulator's arithmetic."""
    free = [0.0] * s.n
    out = []
    for k, a in enumerate(s.arrivals):
        t = s.tables[s.models[k]]
        times: list[tuple[float, float]] = []
        for i, lay in enumerate(t.profile.layers):
            d = plan[k][i]
            ready = a
            for j in lay.inputs:
                f = a if j < 0 else times[j][1]
                src = s.source if j < 0 else plan[k][j]
                ready = max(ready, f + s.transfer(k, j, src, d))
            start = max(ready, free[d])
            free[d] = start + float(t.comp[i, d])
            times.append((start, free[d]))
        out.append(tuple(times))
    return tuple(out)


def evaluate(s: Stream, plan: Plan) -> tuple[float, ...]:
    """Each task's latency under `plan` (`schedule`): its last finish minus its arrival."""
    return tuple(max(f for _, f in times) - a
                 for times, a in zip(schedule(s, plan), s.arrivals, strict=True))


def mean_latency(s: Stream, plan: Plan) -> float:
    return float(np.mean(evaluate(s, plan)))


def assignments(s: Stream) -> int:
    """How many plans there are (devices ** layers of the whole stream)."""
    return s.n ** sum(len(s.layers(k)) for k in range(len(s.arrivals)))


def brute_force(s: Stream, limit: int = 200_000) -> tuple[float, Plan]:
    """The minimum mean latency over every plan, by enumeration (`evaluate`); InstanceError
    beyond `limit` plans."""
    if assignments(s) > limit:
        raise InstanceError(f"{assignments(s)} plans, more than the limit {limit}")
    sizes = [len(s.layers(k)) for k in range(len(s.arrivals))]
    best, best_plan = math.inf, Plan()
    for flat in itertools.product(range(s.n), repeat=sum(sizes)):
        plan = _split(flat, sizes)
        m = mean_latency(s, plan)
        if m < best:
            best, best_plan = m, plan
    return best, best_plan


def _split(flat: Sequence[int], sizes: Sequence[int]) -> Plan:
    out, at = [], 0
    for n in sizes:
        out.append(tuple(int(d) for d in flat[at:at + n]))
        at += n
    return tuple(out)


def alone_bound(s: Stream, k: int) -> float:
    """Task k's latency alone on the idle cluster, minimised over its layers' devices: a lower
    bound on its latency in any schedule (a busy device only delays it)."""
    single = Stream(arrivals=(0.0,), models=(s.models[k],), tables=s.tables, inv_bw=s.inv_bw,
                    lat=s.lat, source=s.source, n=s.n)
    best = math.inf
    for flat in itertools.product(range(s.n), repeat=len(s.layers(k))):
        best = min(best, evaluate(single, (tuple(flat),))[0])
    return best


def coarsen(profile: Profile, cuts: Sequence[int], model: str | None = None) -> Profile:
    """`profile` with its layers merged into blocks: block b is layers cuts[b-1]..cuts[b]-1
    (cuts[0] = 0, ascending, below the layer count). A block sums its layers' FLOPs and
    weights, outputs the sum of the outputs read outside it (the last layer's if none is),
    and reads the blocks (or the model input) its layers read from outside: a chain stays a
    chain, a skip across a cut stays an edge, a fork and join across cuts stays a DAG."""
    bounds = list(cuts) + [len(profile.layers)]
    if bounds[0] != 0 or any(a >= b for a, b in itertools.pairwise(bounds)):
        raise ValueError(f"cuts {list(cuts)}: must start at 0 and rise below "
                         f"{len(profile.layers)}")
    block = [b for b, (lo, hi) in enumerate(itertools.pairwise(bounds)) for _ in range(lo, hi)]
    read_outside = {j for i, lay in enumerate(profile.layers) for j in lay.inputs
                    if j >= 0 and block[j] != block[i]}
    layers: list[Layer] = []
    for b, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        members = profile.layers[lo:hi]
        inputs = sorted({-1 if j < 0 else block[j] for lay in members for j in lay.inputs
                         if j < 0 or block[j] != b})
        exported = [profile.layers[i].out_bytes for i in range(lo, hi) if i in read_outside]
        out = float(sum(exported)) if exported else members[-1].out_bytes
        in_bytes = sum(profile.input_bytes if j < 0 else layers[j].out_bytes for j in inputs)
        layers.append(Layer(name=f"{members[0].name}..{members[-1].name}", kind="Block",
                            flops=sum(lay.flops for lay in members),
                            param_bytes=sum(lay.param_bytes for lay in members),
                            out_bytes=out, inputs=tuple(inputs), in_bytes=in_bytes))
    return Profile(model=model or f"{profile.model}-{len(layers)}",
                   input_bytes=profile.input_bytes, layers=tuple(layers))


class FixedPlan:
    """A scheduler that places by a plan made in advance (e.g. `solve`'s), to replay it
    through the simulator."""

    name = "plan"

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def choose(self, sim: InferenceSim) -> int:
        return self.plan[sim.task.idx][sim.layer]


@dataclass(frozen=True, kw_only=True)
class Optimum:
    plan: Plan
    mean_s: float
    """Its mean latency (`evaluate`)."""
    states: int
    """The most undominated states one stage kept."""
    seconds: float


def optimum(s: Stream, incumbents: Sequence[Plan] = (), max_states: int = 200_000) -> Optimum:
    """The optimal plan by dynamic programming over the tasks in arrival order (exact, no
    tolerance). A state after task k is the devices' free times, each raised to task k + 1's
    arrival (a device free before a task arrives is idle to it: every layer of the task is
    ready no earlier than the arrival), with the latency so far. Each state is expanded by
    every assignment of task k + 1's layers (devices ** layers) through the same
    earliest-start arithmetic as `schedule`; a state is dropped when another has no later free
    time on any device and no more latency so far (whatever follows costs it no less: finishes
    only grow with free times), and when its latency so far plus the later tasks' `alone_bound`
    exceeds the best of `incumbents` and the one-device plans. InstanceError when a stage
    keeps more than `max_states` states."""
    t0 = time.perf_counter()
    K, n = len(s.arrivals), s.n
    sizes = [len(s.layers(k)) for k in range(K)]
    cands = list(incumbents) + [tuple((d,) * m for m in sizes) for d in range(n)]
    ub = min(sum(evaluate(s, p)) for p in cands) * (1 + 1e-12)
    lb = [alone_bound(s, k) for k in range(K)]
    free, cost = np.zeros((1, n)), np.zeros(1)
    back: list[tuple[np.ndarray, np.ndarray]] = []
    most = 1
    for k in range(K):
        assign = np.array(list(itertools.product(range(n), repeat=sizes[k])), dtype=np.int64)
        nxt = s.arrivals[k + 1] if k + 1 < K else None
        got_free, got_cost, got_parent, got_asg = [], [], [], []
        chunk = max(1, 2_000_000 // (len(assign) * n))
        for c0 in range(0, len(cost), chunk):
            f, c, a = _expand(s, k, assign, free[c0:c0 + chunk], cost[c0:c0 + chunk])
            if nxt is not None:
                f = np.maximum(f, nxt)
            ok = np.flatnonzero(c + sum(lb[k + 1:]) <= ub)
            got_free.append(f[ok])
            got_cost.append(c[ok])
            got_parent.append(c0 + ok % len(free[c0:c0 + chunk]))
            got_asg.append(ok // len(free[c0:c0 + chunk]))
        f, c = np.concatenate(got_free), np.concatenate(got_cost)
        parent, asg = np.concatenate(got_parent), np.concatenate(got_asg)
        keep = _undominated(f, c) if nxt is not None else np.array([int(np.argmin(c))])
        if len(keep) > max_states:
            raise InstanceError(f"task {k}: {len(keep)} undominated states, more than "
                                f"{max_states}")
        most = max(most, len(keep))
        back.append((parent[keep], assign[asg[keep]]))
        free, cost = f[keep], c[keep]
    plan: list[tuple[int, ...]] = []
    x = 0
    for par, asg_rows in reversed(back):
        plan.append(tuple(int(v) for v in asg_rows[x]))
        x = int(par[x])
    best = tuple(reversed(plan))
    return Optimum(plan=best, mean_s=mean_latency(s, best), states=most,
                   seconds=time.perf_counter() - t0)


def _expand(s: Stream, k: int, assign: np.ndarray, free: F64,
            cost: F64) -> tuple[F64, F64, np.ndarray]:
    """Every state x every assignment of task k: new free times (A * S, n) and latency so far
    (A * S,), row a * S + state."""
    t = s.tables[s.models[k]]
    a = s.arrivals[k]
    n_a, n_s, n = len(assign), len(cost), s.n
    moves = {j: (t.profile.input_bytes if j < 0 else float(t.out_bytes[j])) * s.inv_bw + s.lat
             for lay in t.profile.layers for j in lay.inputs}
    nf = np.broadcast_to(free, (n_a, n_s, n)).copy()
    fin = np.empty((len(t.profile.layers), n_a, n_s))
    rows = np.arange(n_a)
    for i, lay in enumerate(t.profile.layers):
        d = assign[:, i]
        ready = np.full((n_a, n_s), a)
        for j in lay.inputs:
            if j < 0:
                ready = np.maximum(ready, (a + moves[j][s.source, d])[:, None])
            else:
                ready = np.maximum(ready, fin[j] + moves[j][assign[:, j], d][:, None])
        fin[i] = np.maximum(ready, nf[rows, :, d]) + t.comp[i, d][:, None]
        nf[rows, :, d] = fin[i]
    lat = fin.max(axis=0) - a
    return nf.reshape(-1, n), (cost[None, :] + lat).reshape(-1), assign


def _undominated(free: F64, cost: F64, block: int = 512) -> np.ndarray:
    """Indices of states no other state dominates (free times and cost all no greater; of
    equal ones, one is kept)."""
    order = np.argsort(cost, kind="stable")
    _, first = np.unique(free[order], axis=0, return_index=True)
    order = order[np.sort(first)]  # equal free times: the cheapest
    kept: list[np.ndarray] = []
    front = np.empty((0, free.shape[1]))
    for b0 in range(0, len(order), block):
        idx = order[b0:b0 + block]
        cand = free[idx]
        dom = np.zeros(len(idx), dtype=bool)
        for f0 in range(0, len(front), 4096):
            dom |= np.all(front[None, f0:f0 + 4096] <= cand[:, None], axis=2).any(axis=1)
        # within the block: an earlier (cheaper) one with no later free time
        dom |= np.tril(np.all(cand[None, :, :] <= cand[:, None, :], axis=2), -1).any(axis=1)
        idx = idx[~dom]
        kept.append(idx)
        front = np.vstack([front, free[idx]])
    return np.concatenate(kept)


@dataclass(frozen=True, kw_only=True)
class Solution:
    plan: Plan
    mean_s: float
    """The plan's mean latency (`evaluate`: the simulator's arithmetic)."""
    bound_s: float
    """A proven lower bound on the optimal mean latency (the solver's dual bound)."""
    optimal: bool
    """Proven optimal within `gap`."""
    gap: float
    """(mean - bound) / mean."""
    milp_mean_s: float
    """The solver's own objective (equal to `mean_s` up to its tolerances)."""
    seconds: float
    nodes: int
    status: str


def solve(s: Stream, time_limit: float = 30.0, incumbents: Sequence[Plan] = (),
          mip_gap: float = 1e-6) -> Solution:
    """The optimal plan by a MILP (module docstring), warm-started from the best of
    `incumbents` and of every whole-stream-on-one-device plan; the best plan found and its
    proven gap when the time runs out first."""
    import highspy

    tasks = range(len(s.arrivals))
    sizes = [len(s.layers(k)) for k in tasks]
    cands = list(incumbents) + [tuple((d,) * n for n in sizes) for d in range(s.n)]
    inc = min(cands, key=lambda p: mean_latency(s, p))
    unit = min(t.ref_s for t in s.tables)
    arr = [a / unit for a in s.arrivals]
    lb = [alone_bound(s, k) / unit for k in tasks]
    ub_total = sum(evaluate(s, inc)) / unit * (1 + 1e-9)
    cap = [ub_total - (sum(lb) - lb[k]) for k in tasks]

    g_of: list[tuple[int, int]] = [(k, i) for k in tasks for i in range(sizes[k])]
    idx = {g: n for n, g in enumerate(g_of)}
    n, N = s.n, len(g_of)
    comp = [[float(s.tables[s.models[k]].comp[i, d]) / unit for d in range(n)] for k, i in g_of]
    # columns: x[g, d] (g * n + d), S[g] (N * n + g), C[k] (N * n + N + k)
    X = lambda g, d: g * n + d  # noqa: E731
    S = lambda g: N * n + g  # noqa: E731
    C = lambda k: N * n + N + k  # noqa: E731
    ncol = N * n + N + len(sizes)
    lower = [0.0] * (N * n) + [arr[k] for k, _ in g_of] + [arr[k] + lb[k] for k in tasks]
    upper = [1.0] * (N * n) + [arr[k] + cap[k] for k, _ in g_of] + [arr[k] + cap[k]
                                                                     for k in tasks]
    cost = [0.0] * (N * n + N) + [1.0] * len(sizes)
    rows: list[tuple[float, float, dict[int, float]]] = []

    def row(lo: float, hi: float, coef: dict[int, float]) -> None:
        rows.append((lo, hi, coef))

    def finish(g: int, coef: dict[int, float], sign: float) -> None:
        """Add sign * F[g] = sign * (S[g] + sum_d comp x[g, d]) to coef."""
        coef[S(g)] = coef.get(S(g), 0.0) + sign
        for d in range(n):
            coef[X(g, d)] = coef.get(X(g, d), 0.0) + sign * comp[g][d]

    inf = highspy.kHighsInf
    for g, (k, i) in enumerate(g_of):
        row(1.0, 1.0, {X(g, d): 1.0 for d in range(n)})
        coef = {C(k): 1.0}
        finish(g, coef, -1.0)
        row(0.0, inf, coef)  # C[k] >= F[g]
        for j in s.layers(k)[i].inputs:
            if j < 0:  # S[g] >= arrival + sum_d c(source, d) x[g, d]
                coef = {S(g): 1.0}
                for d in range(n):
                    coef[X(g, d)] = -s.transfer(k, -1, s.source, d) / unit
                row(arr[k], inf, coef)
                continue
            p = idx[(k, j)]
            for d_from, d_to in itertools.product(range(n), repeat=2):
                c = s.transfer(k, j, d_from, d_to) / unit
                if c <= 0:
                    continue
                # S[g] - F[p] - c x[p, d_from] - c x[g, d_to] >= -c
                coef = {S(g): 1.0}
                finish(p, coef, -1.0)
                coef[X(p, d_from)] = coef.get(X(p, d_from), 0.0) - c
                coef[X(g, d_to)] = coef.get(X(g, d_to), 0.0) - c
                row(-c, inf, coef)
    for p, q in itertools.combinations(range(N), 2):
        kp, kq = g_of[p][0], g_of[q][0]
        big = arr[kp] + cap[kp] - arr[kq]
        if big <= 0:
            continue  # p's task has finished before q's arrives in every capped schedule
        for d in range(n):
            # S[q] - F[p] - big x[p, d] - big x[q, d] >= -2 big
            coef = {S(q): 1.0}
            finish(p, coef, -1.0)
            coef[X(p, d)] = coef.get(X(p, d), 0.0) - big
            coef[X(q, d)] = coef.get(X(q, d), 0.0) - big
            row(-2 * big, inf, coef)

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", mip_gap)
    h.setOptionValue("mip_abs_gap", 1e-9)
    h.setOptionValue("random_seed", 0)
    h.addVars(ncol, np.array(lower), np.array(upper))
    h.changeColsCost(ncol, np.arange(ncol, dtype=np.int32), np.array(cost))
    h.changeColsIntegrality(N * n, np.arange(N * n, dtype=np.int32),
                            np.array([highspy.HighsVarType.kInteger] * (N * n)))
    starts: list[int] = []
    index: list[int] = []
    value: list[float] = []
    for _, _, coef in rows:
        starts.append(len(index))
        for c_, v in coef.items():
            if v != 0.0:
                index.append(c_)
                value.append(v)
    h.addRows(len(rows), np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
              len(index), np.array(starts, dtype=np.int32), np.array(index, dtype=np.int32),
              np.array(value))
    h.changeObjectiveOffset(-sum(arr))
    sol = highspy.HighsSolution()
    sol.col_value = _columns(s, inc, unit, ncol, n, g_of)
    sol.value_valid = True
    h.setSolution(sol)
    t0 = time.perf_counter()
    h.run()
    secs = time.perf_counter() - t0
    info = h.getInfo()
    status = h.modelStatusToString(h.getModelStatus())
    plan = inc
    if info.primal_solution_status == 2:  # a feasible solution
        vals = list(h.getSolution().col_value)
        flat = [int(np.argmax([vals[X(g, d)] for d in range(n)])) for g in range(N)]
        found = _split(flat, sizes)
        if mean_latency(s, found) < mean_latency(s, plan):
            plan = found
    k_count = len(sizes)
    mean = mean_latency(s, plan)
    bound = max(float(info.mip_dual_bound) * unit / k_count, sum(lb) * unit / k_count)
    milp = float(info.objective_function_value) * unit / k_count
    gap = max(0.0, (mean - bound) / mean) if mean > 0 else 0.0
    return Solution(plan=plan, mean_s=mean, bound_s=min(bound, mean),
                    optimal=status == "Optimal", gap=gap, milp_mean_s=milp, seconds=secs,
                    nodes=int(info.mip_node_count), status=status)


def _columns(s: Stream, plan: Plan, unit: float, ncol: int, n: int,
             g_of: Sequence[tuple[int, int]]) -> list[float]:
    """The MILP's column values of `plan`'s earliest-start schedule (the warm start)."""
    N = len(g_of)
    vals = [0.0] * ncol
    times = schedule(s, plan)
    for g, (k, i) in enumerate(g_of):
        vals[g * n + plan[k][i]] = 1.0
        vals[N * n + g] = times[k][i][0] / unit
    for k, a in enumerate(s.arrivals):
        vals[N * n + N + k] = max(a, *(f for _, f in times[k])) / unit
    return vals

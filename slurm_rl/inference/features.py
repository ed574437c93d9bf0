"""What a learned scheduler sees for the current layer: one feature row per device (pure numpy,
shared by the environment, the trainer and `slurm-rl plan`). Times are relative to the task's
reference time (its model alone on its best device) and log1p-compressed, so one network serves
every model size, bandwidth and device count.

Columns 0-12 are what the shipped checkpoints read (`BASE_FEATURES`); 13-14 look at the
arrival stream, which HEFT does not: the mean gap between arrivals over the task's reference
time, and how many tasks are expected to arrive before this layer would finish on the device
(the stream's rate is the simulator's; a deployment would measure it from recent arrivals).
A network reads the first `QConfig.features` columns. Column 15 (`EFT_COLUMN`) is not a network
input: it is HEFT's own score, how much later than the earliest the layer would finish on the
device, over the reference time (not compressed, at most `EFT_CAP`), which the HEFT-residual
Q-network (dqn.py, `QConfig.residual`) starts from; with a plan as the base
(`QConfig.base = "plan"` or `"stream"`) it is `plan_gap` instead: 0 on the planned device
(planner.py), and elsewhere how much later than there the layer would finish, plus
`PLAN_MARGIN`.

`candidate_mask` (fifth round, docs/inference-rounds.md): the action set cut to the `k` feasible
devices with the earliest estimated finish for the layer (HEFT's own ranking) plus the feasible
device(s) holding its inputs; k = 0 keeps every feasible device."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from slurm_rl.inference.sim import InferenceSim

BASE_FEATURES = 13
N_FEATURES = 16
INPUT_FEATURES = 15
"""The columns a network may read (the rest are for the residual form's fixed part)."""
EFT_COLUMN = 15
EFT_CAP = 100.0
BASES = ("heft", "plan", "stream")
"""What the residual form corrects: HEFT's finish gap (`eft_gap`), or the `plan_gap` of the
request plan (`plan`) or of the stream plan (`stream`, planner.py)."""
PLAN_MARGIN = 0.01
"""What leaving the plan costs at least in the plan residual's base score (reference times):
an untrained network keeps the plan even where another device would finish the layer sooner."""
F32 = npt.NDArray[np.float32]


def device_features(sim: InferenceSim,
                    planned: int | None = None) -> tuple[F32, npt.NDArray[np.bool_]]:
    """(devices, N_FEATURES) float32 and the feasibility mask for the current layer; with
    `planned` (the plan's device, planner.py) column EFT_COLUMN is `plan_gap`."""
    ready, start, finish, feasible = sim.options()
    task, i = sim.task, sim.layer
    t = task.t
    now, scale = task.arrival, t.ref_s
    lay = t.profile.layers[i]
    base = max([task.arrival] + [task.est_fin[j] for j in lay.inputs if j >= 0])
    best = float(finish[feasible].min()) if feasible.any() else float(finish.min())
    n = sim.cluster.n
    prev = np.zeros(n)
    if i > 0:
        prev[task.devices[i - 1]] = 1.0
    off, rel_speed = sim.device_constants()
    frontier = max(task.est_fin) if task.est_fin else now
    f = np.empty((n, N_FEATURES), dtype=np.float64)
    f[:, 0] = (finish - now) / scale
    f[:, 1] = (finish - best) / scale
    f[:, 2] = t.comp[i] / scale
    f[:, 3] = (ready - base) / scale
    f[:, 4] = (start - ready) / scale
    f[:, 5] = t.suffix[i] / scale
    f[:, 9] = t.out_bytes[i] * off / scale
    f[:, 11] = (sim.est_free - now) / scale
    f[:, 12] = (frontier - now) / scale
    f[:, 13] = 1.0 / (sim.rate * scale)
    f[:, 14] = sim.rate * (finish - now)
    times = [0, 1, 2, 3, 4, 5, 9, 11, 12, 13, 14]
    f[:, times] = np.log1p(np.clip(f[:, times], 0.0, 1e6))
    f[:, EFT_COLUMN] = (eft_gap(finish, best, scale) if planned is None
                        else plan_gap(finish, planned, scale))
    f[:, 6] = prev
    f[:, 7] = np.minimum((sim.used + t.need[i]) / sim.memory, 2.0)
    f[:, 8] = 1.0 - i / len(t.profile.layers)
    f[:, 10] = rel_speed
    return f.astype(np.float32), feasible


def eft_gap(finish: npt.NDArray[np.float64], best: float,
            scale: float) -> npt.NDArray[np.float64]:
    """(finish - best) / scale, capped at EFT_CAP: 0 on HEFT's device, >= 0 elsewhere."""
    gap: npt.NDArray[np.float64] = np.minimum((finish - best) / scale, EFT_CAP)
    return gap


def plan_gap(finish: npt.NDArray[np.float64], planned: int,
             scale: float) -> npt.NDArray[np.float64]:
    """0 on the `planned` device; elsewhere (finish - the planned device's finish) / scale,
    at least 0, plus PLAN_MARGIN; capped at EFT_CAP."""
    gap = np.maximum(finish - finish[planned], 0.0) / scale + PLAN_MARGIN
    gap[planned] = 0.0
    out: npt.NDArray[np.float64] = np.minimum(gap, EFT_CAP)
    return out


def candidates(finish: npt.NDArray[np.float64], feasible: npt.NDArray[np.bool_],
               holders: Sequence[int], k: int) -> npt.NDArray[np.bool_]:
    """The candidate mask: the `k` feasible devices with the earliest `finish` (ties: the lower
    index, as HEFT's argmin) plus every feasible device in `holders`; k <= 0: `feasible`."""
    feasible = np.asarray(feasible, dtype=bool)
    if k <= 0:
        return feasible
    order = np.argsort(np.where(feasible, finish, np.inf), kind="stable")
    keep = np.zeros_like(feasible)
    top = order[: min(k, int(feasible.sum()))]
    keep[top] = True
    for d in holders:
        if 0 <= d < len(keep):
            keep[d] = True
    return keep & feasible


def candidate_mask(sim: InferenceSim, k: int,
                   planned: int | None = None) -> npt.NDArray[np.bool_]:
    """`candidates` for the simulator's current layer: earliest estimated finish as HEFT sees it
    (`sim.options()`), holders the devices its inputs are on (the model's input: the source)
    and the `planned` device when given."""
    opts = sim.options()
    finish, feasible = opts.finish, opts.feasible
    if k <= 0:
        return feasible
    lay = sim.task.t.profile.layers[sim.layer]
    holders = [sim.cluster.source if j < 0 else sim.task.devices[j] for j in lay.inputs]
    if planned is not None:
        holders.append(planned)
    return candidates(finish, feasible, holders, k)

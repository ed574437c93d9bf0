"""Layer profiles from torch modules (imports torch): `slurm-rl inference profile`.

`profile_module` runs a module built on the meta device (no weights, no compute) once with a
forward pre-hook and hook on every leaf module: torch's FLOP counter (`FlopCounterMode`) is read
before and after each leaf, its output's bytes are recorded, and each input tensor is traced to
the leaf that produced it (by object identity) to give the layer graph with its skips.
Memory-bound layers (ReLU, pooling, norms, residual adds) count 0 FLOPs; the cluster's roofline
cost model (cluster.py) times them by the bytes they move instead.

`time_layers` runs the same model with random weights on the CPU (one thread) and times each
leaf; `calibrate` fits the CPU's roofline (FLOP/s, memory bytes/s, per-layer overhead) to those
times: the `cpu` device of cluster.py's presets.
"""

from __future__ import annotations

import csv
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from slurm_rl.inference import models
from slurm_rl.inference.profile import FORMAT, Profile, from_json, save

PROFILES = "profiles"
CPU_TIMES = "cpu_times.csv"
CPU_DEVICE = "cpu_device.json"


def _tensors(args: Any) -> list[torch.Tensor]:
    if isinstance(args, torch.Tensor):
        return [args]
    if isinstance(args, list | tuple):
        return [t for a in args for t in _tensors(a)]
    return []


def _leaves(module: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in module.named_modules() if n and not any(m.children())]


def profile_module(model: nn.Module, example: torch.Tensor, name: str) -> Profile:
    """The layer graph of `model` on `example` (build both on the meta device)."""
    produced: dict[int, int] = {id(example): -1}
    keep: list[torch.Tensor] = [example]  # ids stay unique while the tensors live
    rows: list[dict[str, Any]] = []
    counter = FlopCounterMode(display=False)
    before: dict[int, float] = {}
    inputs_of: dict[int, list[int]] = {}

    def pre(mod: nn.Module, args: Any) -> None:
        ins = []
        for t in _tensors(args):
            # a tensor made outside every leaf (none in models.py) reads the previous layer
            ins.append(produced.get(id(t), len(rows) - 1))
        inputs_of[id(mod)] = sorted(set(ins)) or [len(rows) - 1]
        before[id(mod)] = counter.get_total_flops()

    def post(mod: nn.Module, args: Any, out: Any) -> None:
        outs = _tensors(out)
        i = len(rows)
        for t in outs:
            produced[id(t)] = i
            keep.append(t)
        rows.append({
            "name": names[id(mod)], "kind": type(mod).__name__,
            "flops": float(counter.get_total_flops() - before[id(mod)]),
            "param_bytes": float(sum(p.numel() * p.element_size()
                                     for p in mod.parameters(recurse=False))
                                 + sum(b.numel() * b.element_size()
                                       for b in mod.buffers(recurse=False))),
            "out_bytes": float(sum(t.numel() * t.element_size() for t in outs)),
            "inputs": inputs_of[id(mod)]})

    names = {id(m): n for n, m in _leaves(model)}
    handles = []
    for _, m in _leaves(model):
        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))
    try:
        with torch.no_grad(), counter:
            model(example)
    finally:
        for h in handles:
            h.remove()
    data = {"format": FORMAT, "model": name,
            "input_bytes": float(example.numel() * example.element_size()), "layers": rows}
    return from_json(data, name)


def time_layers(name: str, reps: int = 5) -> list[float]:
    """Median CPU seconds per leaf layer of shipped model `name` (random weights, 1 thread)."""
    torch.manual_seed(0)
    model, x = models.build(name, "cpu")
    starts: dict[int, float] = {}
    samples: list[list[float]] = []
    order: list[int] = []

    def pre(mod: nn.Module, args: Any) -> None:
        starts[id(mod)] = time.perf_counter()

    def post(mod: nn.Module, args: Any, out: Any) -> None:
        order.append(id(mod))
        samples[-1].append(time.perf_counter() - starts[id(mod)])

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    handles = [h for _, m in _leaves(model)
               for h in (m.register_forward_pre_hook(pre), m.register_forward_hook(post))]
    try:
        with torch.no_grad():
            for _ in range(reps + 1):  # the first pass warms caches and allocators
                samples.append([])
                model(x)
    finally:
        for h in handles:
            h.remove()
        torch.set_num_threads(threads)
    runs = samples[1:]
    return [statistics.median(r[i] for r in runs) for i in range(len(runs[0]))]


@dataclass(frozen=True, kw_only=True)
class Calibration:
    flops_per_s: float
    mem_bytes_per_s: float
    overhead_s: float
    median_abs_rel_error: float
    """Per layer, |predicted - measured| / measured, median over all layers of all models."""


def predict(flops: float, bytes_moved: float, cal: Calibration) -> float:
    return cal.overhead_s + max(flops / cal.flops_per_s, bytes_moved / cal.mem_bytes_per_s)


def calibrate(points: list[tuple[float, float, float]]) -> Calibration:
    """Fit the roofline t = o + max(flops/F, bytes/B) to (flops, bytes, seconds) points: for
    each candidate overhead o, F and B are medians over the FLOP-heavy and the 0-FLOP layers;
    the o with the least median relative error wins."""
    times = sorted(t for _, _, t in points)
    best: Calibration | None = None
    for q in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9):
        o = times[0] * q
        comp = [f / (t - o) for f, b, t in points if f > 0 and t > o]
        mem = [b / (t - o) for f, b, t in points if f == 0 and b > 0 and t > o]
        if not comp or not mem:
            continue
        cal = Calibration(flops_per_s=statistics.median(comp),
                          mem_bytes_per_s=statistics.median(mem), overhead_s=o,
                          median_abs_rel_error=0.0)
        err = statistics.median(abs(predict(f, b, cal) - t) / t for f, b, t in points)
        if best is None or err < best.median_abs_rel_error:
            best = Calibration(flops_per_s=cal.flops_per_s,
                               mem_bytes_per_s=cal.mem_bytes_per_s, overhead_s=o,
                               median_abs_rel_error=err)
    if best is None:
        raise ValueError("calibration needs layers with and without FLOPs")
    return best


def regenerate(out_dir: Path, time_cpu: bool = True, reps: int = 5,
               echo: Any = print) -> None:
    """Write out_dir/profiles/<model>.json for every model, and with `time_cpu` the measured
    CPU times (out_dir/cpu_times.csv) and the fitted CPU device (out_dir/cpu_device.json): the
    layout of the shipped slurm_rl/data/inference/, so naming that folder regenerates the
    shipped files and any other folder leaves them alone."""
    profiles_dir = out_dir / PROFILES
    profiles_dir.mkdir(parents=True, exist_ok=True)
    points: list[tuple[float, float, float]] = []
    rows: list[tuple[str, int, str, str, float, float, float]] = []
    for name in models.BUILDERS:
        model, x = models.build(name, "meta")
        prof = profile_module(model, x, name)
        save(prof, profiles_dir / f"{name}.json")
        echo(f"{name}: {len(prof.layers)} layers, {prof.total_flops / 1e9:.2f} GFLOP, "
             f"{sum(lay.param_bytes for lay in prof.layers) / 1e6:.1f} MB of weights")
        if time_cpu:
            secs = time_layers(name, reps)
            if len(secs) != len(prof.layers):
                raise RuntimeError(f"{name}: timed {len(secs)} layers, profiled "
                                   f"{len(prof.layers)}")
            for i, (lay, s) in enumerate(zip(prof.layers, secs, strict=True)):
                points.append((lay.flops, lay.bytes_moved, s))
                rows.append((name, i, lay.name, lay.kind, lay.flops, lay.bytes_moved, s))
    if not time_cpu:
        return
    cal = calibrate(points)
    with open(out_dir / CPU_TIMES, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "layer", "name", "kind", "flops", "bytes_moved", "measured_s",
                    "predicted_s"])
        for r in rows:
            w.writerow([*r[:6], f"{r[6]:.3e}", f"{predict(r[4], r[5], cal):.3e}"])
    (out_dir / CPU_DEVICE).write_text(json.dumps({
        "flops_per_s": cal.flops_per_s, "mem_bytes_per_s": cal.mem_bytes_per_s,
        "overhead_s": cal.overhead_s,
        "median_abs_rel_error": cal.median_abs_rel_error,
        "measured": f"torch.set_num_threads(1), batch 1, median of {reps} passes"},
        indent=1) + "\n")
    for name in models.BUILDERS:
        meas = sum(r[6] for r in rows if r[0] == name)
        pred = sum(predict(r[4], r[5], cal) for r in rows if r[0] == name)
        echo(f"cpu {name}: measured {meas * 1e3:.1f} ms, roofline {pred * 1e3:.1f} ms")
    echo(f"cpu roofline: {cal.flops_per_s / 1e9:.1f} GFLOP/s, "
         f"{cal.mem_bytes_per_s / 1e9:.1f} GB/s, overhead {cal.overhead_s * 1e6:.0f} us, "
         f"median per-layer error {cal.median_abs_rel_error:.0%}")

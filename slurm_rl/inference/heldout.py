"""Seeded random inference settings for training and for a held-out evaluation (pure; numpy).

A `Setting` is one cell: a cluster (2-16 devices, each somewhere between an edge CPU and an
H100-class GPU), uniform links of 0.1-400 Gbit/s (log-uniform), one model structure, a load
(0.3-0.95) and a stream seed. `setting(seed)` draws it from the seed alone, so a cell is named
by its seed. Two disjoint seed ranges keep training and evaluation apart:
`TRAIN_SEEDS` (what a trainer may draw) and `HELD_OUT_SEEDS` (what only the evaluation reads).
The structures are split the same way: a training setting streams a training structure (shipped
vgg, resnet, bert, or a generated chain or residual net), a held-out one also the structures
training never sees (shipped mobilenet and gpt, generated inception-like nets with parallel
branches that fan out and join), half of its cells on those.

Generated structures are drawn from the setting's seed (their size, FLOPs, weights and
activations span the shipped profiles' range), so a held-out generated net is never one a
trainer met even when the family is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slurm_rl.inference import cluster as cl
from slurm_rl.inference.profile import Layer, Profile, resolve

TRAIN_SEEDS = range(0, 1_000_000)
HELD_OUT_SEEDS = range(1_000_000_000, 1_001_000_000)
DEV_SEEDS = TRAIN_SEEDS[500_000:600_000]
"""A development range: training settings no trainer draws by default (`randomised_scenarios`
reads the block of its seed mod 9; seeds 1-3 read 100 000-399 999), read with the held-out
structure pool, for tuning a heuristic without looking at the held-out cells."""
SHIPPED_TRAIN = ("vgg", "resnet", "bert")
SHIPPED_HELD_OUT = ("mobilenet", "gpt")
GENERATED_TRAIN = ("chain", "residual")
GENERATED_HELD_OUT = ("inception",)
TRAIN_STRUCTURES = SHIPPED_TRAIN + GENERATED_TRAIN
HELD_OUT_STRUCTURES = SHIPPED_HELD_OUT + GENERATED_HELD_OUT

# Device classes from edge to H100-class (effective batch-1 rates, as cluster.PRESETS).
_CPU = cl.PRESETS["cpu"]
CLASSES: dict[str, dict[str, float]] = {
    "edge": {"flops_per_s": _CPU["flops_per_s"] / 4, "mem_bytes_per_s": _CPU["mem_bytes_per_s"]
             / 2, "memory_bytes": 4e9, "overhead_s": 3e-5},
    "cpu": dict(_CPU),
    "t4": dict(cl.PRESETS["t4"]),
    "v100": dict(cl.PRESETS["v100"]),
    "a100": dict(cl.PRESETS["a100"]),
    "h100": {"flops_per_s": 1.5e14, "mem_bytes_per_s": 3.0e12, "memory_bytes": 8e10,
             "overhead_s": 1.5e-5},
}
MIN_DEVICES, MAX_DEVICES = 2, 16
MIN_GBPS, MAX_GBPS = 0.1, 400.0
MIN_LOAD, MAX_LOAD = 0.3, 0.95


@dataclass(frozen=True, kw_only=True, eq=False)
class Setting:
    seed: int
    classes: tuple[str, ...]
    """Each device's class (CLASSES), in device order; device 0 takes the requests."""
    gbps: float
    structure: str
    """A shipped profile's name or a generated family (GENERATED_*)."""
    load: float
    cluster: cl.Cluster
    profile: Profile


def _cluster(rng: np.random.Generator) -> tuple[tuple[str, ...], float, cl.Cluster]:
    n = int(rng.integers(MIN_DEVICES, MAX_DEVICES + 1))
    names = list(CLASSES)
    lo = int(rng.integers(len(names)))
    hi = int(rng.integers(lo, len(names)))
    classes = tuple(names[int(rng.integers(lo, hi + 1))] for _ in range(n))
    gbps = float(np.exp(rng.uniform(np.log(MIN_GBPS), np.log(MAX_GBPS))))
    devices = []
    for k, c in enumerate(classes):
        p = CLASSES[c]
        jitter = float(rng.lognormal(0.0, 0.15))  # the same class is not one exact speed
        devices.append(cl.Device(name=f"{c}-{k}", flops_per_s=p["flops_per_s"] * jitter,
                                 mem_bytes_per_s=p["mem_bytes_per_s"] * jitter,
                                 memory_bytes=p["memory_bytes"], overhead_s=p["overhead_s"]))
    return classes, gbps, cl.Cluster(devices=tuple(devices),
                                     bandwidth=cl.uniform_bandwidth(n, gbps))


def _layer(rng: np.random.Generator, name: str, kind: str, inputs: tuple[int, ...],
           flops: float, out_bytes: float, in_bytes: float) -> Layer:
    params = float(flops / rng.uniform(20, 400)) if kind != "Add" else 0.0
    return Layer(name=name, kind=kind, flops=flops if kind != "Add" else 0.0,
                 param_bytes=params, out_bytes=out_bytes, inputs=inputs, in_bytes=in_bytes)


def generated(family: str, rng: np.random.Generator) -> Profile:
    """A random net of `family`: 'chain' (a plain stack), 'residual' (a stack whose blocks add
    their input back: each Add reads the block's last layer and its input), 'inception'
    (blocks of 2-4 parallel branches of 1-3 layers from one input, joined by a concat)."""
    total = float(np.exp(rng.uniform(np.log(2e8), np.log(8e9))))
    act = float(np.exp(rng.uniform(np.log(5e4), np.log(3e6))))
    input_bytes = float(np.exp(rng.uniform(np.log(1e3), np.log(6e5))))
    layers: list[Layer] = []

    def add(kind: str, inputs: tuple[int, ...], weight: float) -> int:
        out = act * float(rng.uniform(0.3, 1.5))
        ins = sum(input_bytes if j < 0 else layers[j].out_bytes for j in inputs)
        layers.append(_layer(rng, f"{kind.lower()}{len(layers)}", kind, inputs, weight, out,
                             ins))
        return len(layers) - 1

    weights = rng.dirichlet(np.ones(64)) * total  # flops per compute layer, drawn in order
    w = iter(weights)
    last = -1
    if family == "chain":
        for _ in range(int(rng.integers(8, 40))):
            last = add("Conv2d", (last,), next(w))
    elif family == "residual":
        last = add("Conv2d", (last,), next(w))
        for _ in range(int(rng.integers(4, 12))):
            start = last
            for _ in range(int(rng.integers(1, 4))):
                last = add("Conv2d", (last,), next(w))
            last = add("Add", (last, start), 0.0)
    elif family == "inception":
        last = add("Conv2d", (last,), next(w))
        for _ in range(int(rng.integers(3, 7))):
            ends = []
            for _ in range(int(rng.integers(2, 5))):
                b = last
                for _ in range(int(rng.integers(1, 4))):
                    b = add("Conv2d", (b,), float(next(w, total / 64)))
                ends.append(b)
            last = add("Add", tuple(ends), 0.0)
    else:
        raise ValueError(f"unknown generated family {family!r}")
    return Profile(model=f"{family}-gen", input_bytes=input_bytes, layers=tuple(layers))


def setting(seed: int, held_out: bool | None = None) -> Setting:
    """The setting of `seed`; its structure pool is the held-out one when the seed lies in
    HELD_OUT_SEEDS (or `held_out` says so), else the training one."""
    if held_out is None:
        held_out = seed in HELD_OUT_SEEDS
    rng = np.random.default_rng([seed, 2024])
    classes, gbps, cluster = _cluster(rng)
    pool: tuple[str, ...] = TRAIN_STRUCTURES
    if held_out and rng.random() < 0.5:
        pool = HELD_OUT_STRUCTURES
    structure = str(pool[int(rng.integers(len(pool)))])
    load = float(rng.uniform(MIN_LOAD, MAX_LOAD))
    prof = (generated(structure, rng) if structure in GENERATED_TRAIN + GENERATED_HELD_OUT
            else resolve(structure))
    return Setting(seed=seed, classes=classes, gbps=gbps, structure=structure, load=load,
                   cluster=cluster, profile=prof)


def fits(s: Setting) -> bool:
    """The whole model fits the memory of one device (so every scheduler can place it)."""
    need = sum(lay.param_bytes + lay.out_bytes for lay in s.profile.layers)
    return any(d.memory_bytes >= need for d in s.cluster.devices)


def settings(seeds: range, n: int, start: int = 0,
             held_out: bool | None = None) -> tuple[Setting, ...]:
    """The first `n` settings that fit (`fits`) of `seeds`, from its `start`-th seed on
    (`held_out` as `setting` takes it)."""
    out: list[Setting] = []
    for seed in seeds[start:]:
        if len(out) == n:
            break
        s = setting(seed, held_out)
        if fits(s):
            out.append(s)
    if len(out) < n:
        raise ValueError(f"only {len(out)} fitting settings in {seeds} from {start}")
    return tuple(out)

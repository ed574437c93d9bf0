"""Speed-up curves: how fast a DL training job runs at n GPUs.

The measured curves (iterations/s per global batch size × GPU count, ElasticFlow artifact) ship
in `slurm_rl/data/throughput/`. A job's own rate at the GPU count it reported is scaled by
speedup(n) / speedup(n_reported), so the curve only needs to be right in shape, not in absolute
speed. Counts between measured points are interpolated linearly in log2(n); past 64 GPUs the
curve stays flat. Models without a curve use the element-wise median of all normalised curves.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources

MEASURED_GPUS = (1, 2, 4, 8, 16, 32, 64)

PROFILE_SLACK = 4.0
"""How much faster than its model's measured throughput (A100s) a job's progress may claim to
be before it is not believed: newer GPUs and better input pipelines are faster, never 4x."""


@dataclass(frozen=True, kw_only=True)
class Curve:
    model: str
    batch_size: int
    gpus: tuple[int, ...]
    iters_per_s: tuple[float, ...]

    def throughput(self, gpus: int) -> float:
        if gpus <= 0:
            return 0.0
        if gpus <= self.gpus[0]:
            return self.iters_per_s[0] * gpus / self.gpus[0]
        if gpus >= self.gpus[-1]:
            return self.iters_per_s[-1]
        x = math.log2(gpus)
        for i in range(1, len(self.gpus)):
            if gpus <= self.gpus[i]:
                x0, x1 = math.log2(self.gpus[i - 1]), math.log2(self.gpus[i])
                y0, y1 = self.iters_per_s[i - 1], self.iters_per_s[i]
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        raise AssertionError("unreachable")

    def speedup(self, gpus: int) -> float:
        return self.throughput(gpus) / self.iters_per_s[0]


@cache
def curves(gpu_type: str = "A100") -> dict[str, tuple[Curve, ...]]:
    """All measured curves for one GPU type, keyed by model name (sorted by batch size)."""
    folder = resources.files("slurm_rl") / "data" / "throughput" / gpu_type
    out: dict[str, list[Curve]] = {}
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".csv"):
            continue
        model = entry.name[: -len(".csv")]
        with entry.open() as fh:
            rows = list(csv.reader(fh))
        gpus = tuple(int(c) for c in rows[0][1:])
        for row in rows[1:]:
            # A blank cell means "not measured": the curve ends at the last measured count.
            values = [float(v) for v in row[1:] if v.strip()]
            out.setdefault(model, []).append(
                Curve(model=model, batch_size=int(row[0]), gpus=gpus[: len(values)],
                      iters_per_s=tuple(values))
            )
    return {m: tuple(sorted(cs, key=lambda c: c.batch_size)) for m, cs in out.items()}


@cache
def _generic_curve(gpu_type: str) -> Curve:
    normalised = [
        [v / c.iters_per_s[0] for v in c.iters_per_s]
        for cs in curves(gpu_type).values() for c in cs
    ]
    normalised = [n for n in normalised if len(n) == len(MEASURED_GPUS)]
    med = tuple(sorted(col)[len(col) // 2] for col in zip(*normalised, strict=True))
    return Curve(model="generic", batch_size=0, gpus=MEASURED_GPUS, iters_per_s=med)


def curve_for(model: str | None, batch_size: int | None = None,
              gpu_type: str = "A100") -> Curve:
    """The curve for a model at the nearest measured batch size (generic if unknown)."""
    cs = curves(gpu_type).get((model or "").lower())
    if not cs:
        return _generic_curve(gpu_type)
    if batch_size is None:
        return cs[0]
    return min(cs, key=lambda c: (abs(math.log2(c.batch_size) - math.log2(max(batch_size, 1))),
                                  c.batch_size))


def speedup(model: str | None, gpus: int, batch_size: int | None = None,
            gpu_type: str = "A100") -> float:
    """Throughput at `gpus` relative to one GPU."""
    return curve_for(model, batch_size, gpu_type).speedup(gpus)


def scaled_rate(rate: float, from_gpus: int, to_gpus: int, model: str | None,
                batch_size: int | None = None) -> float:
    """A job's observed rate at `from_gpus`, predicted at `to_gpus`."""
    if from_gpus == to_gpus:
        return rate
    c = curve_for(model, batch_size)
    base = c.throughput(from_gpus)
    return rate * c.throughput(to_gpus) / base if base > 0 else 0.0


@lru_cache(maxsize=4096)
def fastest(model: str, gpus: int) -> float:
    """The most iterations per second any measured batch size of `model` reaches at `gpus`."""
    return max(c.throughput(gpus) for c in curves()[model])


def rate_ceiling(model: str | None, gpus: int) -> float | None:
    """The fastest steps per second a job of `model` on `gpus` GPUs may be believed to make
    (`PROFILE_SLACK` x its fastest measured rate); None for a model without a measured curve."""
    name = model.lower() if model else None
    if name is None or name not in curves():
        return None
    return PROFILE_SLACK * fastest(name, max(gpus, 1))

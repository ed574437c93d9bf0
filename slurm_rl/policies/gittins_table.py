"""The Gittins-index table of the `gittins` policy (and of the `rl` policy's Gittins prior
feature): the index of a job's attained service, per GPU-count bucket, from the duration
distribution of the TRAINING traces (`slurm_rl.splits`). This module reads and computes the
table; the command that rebuilds it from traces by simulation (`slurm-rl gittins-table build`)
lives on the simulator's side, `slurm_rl/sim/gittins_build.py`, so that no policy imports the
simulator.

For a job of duration S (seconds at its GPU count) that has run for a seconds, the Gittins index
is G(a) = max over D > 0 of P(S - a <= D | S > a) / E[min(S - a, D) | S > a] (1/s): the best
completion probability per second of further service. Over an empirical distribution the max is
reached at D = x - a for a sample x > a (between samples the numerator is flat and the
denominator grows), so it is found exactly in one pass over the sorted samples.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, None))
"""GPU-count buckets (lowest, highest or None). The training traces hold at least 115 jobs in
each (17+: 115, 9-16: 159, 2: 369, 3-4: 453, 5-8: 2,942, 1: 19,640)."""
POINTS = 200
"""Grid points per bucket: a = 0, then log-spaced from FIRST_S to the bucket's longest job."""
FIRST_S = 10.0
QUANTUM_S = 60.0
"""The least service D the index looks ahead (`gittins_index`): the policy tick of the
simulator's and the daemon's default."""
MIN_SURVIVORS = 10
"""Grid points where fewer training jobs than this ran longer take the bucket's lowest index
over the points with enough (below): the exact index of a handful of samples says 'the end is
near' (G -> 1/(x_max - a)), which a job on another cluster that outlives them all would
contradict. Past its longest job, too, a job has the bucket's lowest index."""

SHIPPED = "gittins/itp-training.csv"
"""The shipped table, under slurm_rl/data."""


def bucket_label(lo: int, hi: int | None) -> str:
    return f"{lo}+" if hi is None else str(lo) if lo == hi else f"{lo}-{hi}"


def gittins_index(durations: Sequence[float], a: float, quantum: float = 0.0) -> float | None:
    """G(a) over the empirical distribution of `durations` (sorted ascending), the max taken
    over D >= `quantum`; None if no duration exceeds a (the index is undefined there).

    Why a quantum: over an empirical distribution, D -> 0 just before a sample gives
    1 / (survivors x D), unbounded; a scheduler that decides every `quantum` seconds can not
    give a job less service than that anyway.
    """
    n = len(durations)
    i0 = bisect_right(durations, a)
    best = 0.0
    served = 0.0  # sum of (x_i - a) over the survivors up to k
    k = i0
    while k < n and durations[k] - a <= quantum:  # finished within the first quantum
        served += durations[k] - a
        k += 1
    if quantum > 0 and i0 < n:
        best = (k - i0) / (served + (n - k) * quantum)
    for k in range(k, n):  # noqa: B020 (continues from the first k past the quantum)
        r = durations[k] - a
        served += r
        # D = r: survivors up to k finish (k - i0 + 1 of them, ties after k counted when the
        # loop reaches the last of them); later ones are served D each.
        v = (k - i0 + 1) / (served + (n - k - 1) * r)
        if v > best:
            best = v
    return best if i0 < n else None


def grid(longest: float, points: int = POINTS, first: float = FIRST_S) -> tuple[float, ...]:
    """a = 0, then points - 1 log-spaced values from `first` to `longest` (rounded to 1e-3 s,
    so the table is the same bytes everywhere)."""
    if longest <= first or points < 3:
        return (0.0, longest) if longest > 0 else (0.0,)
    ratio = math.log(longest / first) / (points - 2)
    return (0.0,) + tuple(round(first * math.exp(i * ratio), 3) for i in range(points - 1))


@dataclass(frozen=True, kw_only=True)
class Curve:
    """One bucket's index on its grid: index[i] holds for attained in [attained[i],
    attained[i+1]) (step lookup); past the last point the last value."""

    lo: int
    hi: int | None
    samples: int
    attained: tuple[float, ...]
    index: tuple[float, ...]
    survivors: tuple[int, ...]

    @property
    def label(self) -> str:
        return bucket_label(self.lo, self.hi)

    def holds(self, gpus: int) -> bool:
        return self.lo <= gpus and (self.hi is None or gpus <= self.hi)

    def at(self, attained: float) -> float:
        i = bisect_right(self.attained, attained) - 1
        return self.index[max(i, 0)]


def curve(lo: int, hi: int | None, durations: Iterable[float], points: int = POINTS,
          min_survivors: int = MIN_SURVIVORS, quantum: float = QUANTUM_S) -> Curve:
    xs = sorted(durations)
    if not xs:
        raise ValueError(f"no training job in GPU bucket {bucket_label(lo, hi)}")
    at = grid(xs[-1], points)
    surv = tuple(len(xs) - bisect_right(xs, a) for a in at)
    exact = [gittins_index(xs, a, quantum) if s >= min_survivors else None
             for a, s in zip(at, surv, strict=True)]
    known = [g for g in exact if g is not None]
    floor = min(known) if known else 1.0 / (sum(xs) / len(xs))  # (min_survivors > len(xs))
    return Curve(lo=lo, hi=hi, samples=len(xs), attained=at,
                 index=tuple(floor if g is None else g for g in exact), survivors=surv)


@dataclass(frozen=True, kw_only=True)
class GittinsTable:
    curves: tuple[Curve, ...]
    header: tuple[str, ...] = ()
    """The comment lines it was read with or will be written with (provenance)."""

    def curve_for(self, gpus: int) -> Curve:
        for c in self.curves:
            if c.holds(gpus):
                return c
        return self.curves[-1] if gpus > 0 else self.curves[0]

    def lookup(self, gpus: int, attained: float) -> tuple[float, str]:
        """(index in 1/s, bucket label) of a job of `gpus` GPUs that has run `attained` s."""
        c = self.curve_for(gpus)
        return c.at(attained), c.label


def build(durations: dict[int, list[float]] | Iterable[tuple[int, float]],
          header: Sequence[str] = (), points: int = POINTS,
          min_survivors: int = MIN_SURVIVORS, quantum: float = QUANTUM_S) -> GittinsTable:
    """The table from (gpus, duration) pairs (or durations by GPU count), over `BUCKETS`."""
    pairs = ([(g, d) for g, ds in durations.items() for d in ds]
             if isinstance(durations, dict) else list(durations))
    curves = []
    for lo, hi in BUCKETS:
        xs = [d for g, d in pairs if lo <= g and (hi is None or g <= hi)]
        curves.append(curve(lo, hi, xs, points, min_survivors, quantum))
    return GittinsTable(curves=tuple(curves), header=tuple(header))


COLUMNS = ("bucket", "gpus_min", "gpus_max", "samples", "attained_s", "index_per_s", "survivors")


def dumps(table: GittinsTable) -> str:
    """CSV text, `#` comment lines first; floats as repr (exact round trip, same bytes)."""
    lines = [f"# {h}" for h in table.header]
    lines.append(",".join(COLUMNS))
    for c in table.curves:
        for a, g, s in zip(c.attained, c.index, c.survivors, strict=True):
            lines.append(f"{c.label},{c.lo},{'' if c.hi is None else c.hi},{c.samples},"
                         f"{a!r},{g!r},{s}")
    return "\n".join(lines) + "\n"


def loads(text: str, source: str = "table") -> GittinsTable:
    header: list[str] = []
    rows: dict[tuple[int, int | None], list[tuple[float, float, int, int]]] = {}
    seen_columns = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            header.append(line[1:].strip())
            continue
        if not line.strip():
            continue
        cells = line.split(",")
        if not seen_columns:
            if tuple(cells) != COLUMNS:
                raise ValueError(f"{source}:{n}: expected columns {','.join(COLUMNS)}")
            seen_columns = True
            continue
        try:
            _, lo_s, hi_s, samples, a, g, surv = cells
            key = (int(lo_s), int(hi_s) if hi_s else None)
            row = (float(a), float(g), int(surv), int(samples))
        except ValueError as exc:
            raise ValueError(f"{source}:{n}: bad row {line!r}: {exc}") from None
        if not (math.isfinite(row[0]) and math.isfinite(row[1]) and row[1] > 0):
            raise ValueError(f"{source}:{n}: attained and a positive index must be finite")
        rows.setdefault(key, []).append(row)
    if not rows:
        raise ValueError(f"{source}: no rows")
    curves = []
    for (lo, hi), rs in sorted(rows.items()):
        at = tuple(r[0] for r in rs)
        if list(at) != sorted(set(at)):
            raise ValueError(f"{source}: bucket {bucket_label(lo, hi)}: attained not ascending")
        curves.append(Curve(lo=lo, hi=hi, samples=rs[0][3], attained=at,
                            index=tuple(r[1] for r in rs), survivors=tuple(r[2] for r in rs)))
    return GittinsTable(curves=tuple(curves), header=tuple(header))


def read(path: str | Path) -> GittinsTable:
    return loads(Path(path).read_text(), str(path))


def shipped_path() -> Path:
    return Path(str(resources.files("slurm_rl") / "data" / SHIPPED))


@cache
def shipped() -> GittinsTable:
    """The table shipped in the package (read once per process)."""
    return read(shipped_path())

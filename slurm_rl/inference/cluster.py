"""Devices, the bandwidth matrix and the roofline cost model (pure; numpy).

A device runs one layer at a time; a layer takes `overhead_s + max(flops / flops_per_s,
bytes_moved / mem_bytes_per_s)` on it (a roofline: memory-bound layers such as ReLU or pooling
count 0 FLOPs and are timed by the bytes they move), or, on a device marked
`measured_layer_times`, the layer's CPU time measured by `slurm-rl inference profile`
(data/inference/cpu_times.csv) where that file has the model. Moving `b` bytes from device i
to j takes `link_latency_s + b / bandwidth[i, j]` (nothing on the same device). Requests
arrive at device `source`.

Cluster file (TOML):

    source = 0                      # device index where the model's input arrives
    bandwidth_gbps = 10             # every link, or:
    bandwidth_file = "bw.csv"       # an n x n matrix in Gbit/s (relative to this file)
    link_latency_s = 1.3e-4         # optional, default 0: per transfer between two devices
    [[device]]
    type = "a100"                   # a preset (PRESETS), or give every number below
    count = 2                       # optional, default 1
    name = "gpu"                    # optional; devices are named NAME-k
    flops_per_s = 6e13
    mem_bytes_per_s = 1.5e12
    memory_bytes = 4e10
    overhead_s = 2e-5
    measured_layer_times = true     # optional: this machine's measured CPU times per layer

Bandwidth CSV: one row per device in file order, n numbers per row (Gbit/s; the diagonal is
ignored and may be 0); `#` lines are comments.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from slurm_rl.inference.profile import Profile

F64 = npt.NDArray[np.float64]
MAX_DEVICES = 4096
GBPS = 1e9 / 8  # bytes/s per Gbit/s


class ClusterError(ValueError):
    """A malformed cluster description or bandwidth matrix (one line, naming file and field)."""


@dataclass(frozen=True, kw_only=True)
class Device:
    name: str
    flops_per_s: float
    mem_bytes_per_s: float
    memory_bytes: float
    overhead_s: float = 0.0
    measured_layer_times: bool = False
    """Time a layer by its measured CPU time (cpu_times.csv) where that file has its model."""


_DATA = Path(__file__).resolve().parent.parent / "data" / "inference"
_measured: dict[str, list[tuple[str, str, float, float]]] = {}
_warned: set[str] = set()
"""Models measured_layer_times fell back to the roofline for (said once each)."""
log = logging.getLogger(__name__)


def measured_times(profile: Profile) -> F64 | None:
    """The per-layer CPU seconds `slurm-rl inference profile` measured for this profile's model
    (cpu_times.csv), or None when the file has no such model or its layers differ (name, kind
    or FLOPs) from the profile's."""
    if not _measured:
        try:
            with open(_DATA / "cpu_times.csv", newline="") as fh:
                for row in csv.DictReader(fh):
                    _measured.setdefault(row["model"], []).append(
                        (row["name"], row["kind"], float(row["flops"]),
                         float(row["measured_s"])))
        except OSError:
            return None
    rows = _measured.get(profile.model)
    if rows is None or len(rows) != len(profile.layers) or any(
            (n, k, f) != (lay.name, lay.kind, lay.flops)
            for (n, k, f, _), lay in zip(rows, profile.layers, strict=True)):
        return None
    return np.array([t for *_, t in rows], dtype=np.float64)


def _cpu_preset() -> dict[str, float]:
    cal = json.loads((_DATA / "cpu_device.json").read_text())
    return {"flops_per_s": cal["flops_per_s"], "mem_bytes_per_s": cal["mem_bytes_per_s"],
            "memory_bytes": 8e9, "overhead_s": cal["overhead_s"]}


# Effective (not peak) batch-1 throughput; `cpu` is this machine's, fitted by `profile`.
PRESETS: dict[str, dict[str, float]] = {
    "a100": {"flops_per_s": 6e13, "mem_bytes_per_s": 1.5e12, "memory_bytes": 4e10,
             "overhead_s": 2e-5},
    "v100": {"flops_per_s": 2.5e13, "mem_bytes_per_s": 8e11, "memory_bytes": 1.6e10,
             "overhead_s": 2e-5},
    "t4": {"flops_per_s": 8e12, "mem_bytes_per_s": 3e11, "memory_bytes": 1.6e10,
           "overhead_s": 2e-5},
    "cpu": _cpu_preset(),
}
_FIELDS = ("flops_per_s", "mem_bytes_per_s", "memory_bytes", "overhead_s")


@dataclass(frozen=True, kw_only=True, eq=False)
class Cluster:
    devices: tuple[Device, ...]
    bandwidth: F64
    """(n, n) bytes/s; the diagonal is +inf (no transfer on one device)."""
    source: int = 0
    link_latency_s: float = 0.0
    """Seconds every transfer between two different devices takes on top of bytes/bandwidth
    (measured for gloo over loopback by benchmarks/bench_inference.py --gloo)."""

    def __post_init__(self) -> None:
        n = len(self.devices)
        if not 0 < n <= MAX_DEVICES:
            raise ClusterError(f"a cluster needs 1..{MAX_DEVICES} devices, not {n}")
        if self.bandwidth.shape != (n, n):
            raise ClusterError(f"bandwidth matrix is {self.bandwidth.shape}, expected ({n}, {n})")
        if not 0 <= self.source < n:
            raise ClusterError(f"source: {self.source} is not a device index (0..{n - 1})")
        if not (math.isfinite(self.link_latency_s) and self.link_latency_s >= 0):
            raise ClusterError(f"link_latency_s: {self.link_latency_s!r} is not a finite "
                               "number >= 0")

    @property
    def n(self) -> int:
        return len(self.devices)

    def arrays(self) -> tuple[F64, F64, F64, F64]:
        """flops_per_s, mem_bytes_per_s, memory_bytes, overhead_s as arrays over devices."""
        return tuple(np.array([getattr(d, f) for d in self.devices], dtype=np.float64)
                     for f in _FIELDS)  # type: ignore[return-value]

    def latency(self) -> F64:
        """(n, n) seconds per transfer on top of bytes/bandwidth; 0 on the diagonal."""
        m = np.full((self.n, self.n), self.link_latency_s)
        np.fill_diagonal(m, 0.0)
        return m

    def compute_times(self, profile: Profile) -> F64:
        """(layers, devices) seconds of each layer on each device (the roofline, or the
        measured CPU times on a device marked `measured_layer_times`)."""
        fl, bw, _, oh = self.arrays()
        flops = np.array([lay.flops for lay in profile.layers])
        moved = np.array([lay.bytes_moved for lay in profile.layers])
        out: F64 = oh[None, :] + np.maximum(flops[:, None] / fl[None, :],
                                            moved[:, None] / bw[None, :])
        marked = [k for k, d in enumerate(self.devices) if d.measured_layer_times]
        if marked:
            times = measured_times(profile)
            if times is not None:
                out[:, marked] = times[:, None]
            elif profile.model not in _warned:
                _warned.add(profile.model)
                log.warning("measured_layer_times: cpu_times.csv has no measured layers for "
                            "model %s (or they differ from its profile): its layers are timed "
                            "by the roofline", profile.model)
        return out


def uniform_bandwidth(n: int, gbps: float) -> F64:
    m = np.full((n, n), gbps * GBPS)
    np.fill_diagonal(m, np.inf)
    return m


def make(types: list[str] | tuple[str, ...], gbps: float = 10.0, source: int = 0) -> Cluster:
    """A cluster of preset devices (named TYPE-k) on uniform links of `gbps` Gbit/s."""
    devs = tuple(Device(name=f"{t}-{k}", flops_per_s=PRESETS[t]["flops_per_s"],
                        mem_bytes_per_s=PRESETS[t]["mem_bytes_per_s"],
                        memory_bytes=PRESETS[t]["memory_bytes"],
                        overhead_s=PRESETS[t]["overhead_s"]) for k, t in enumerate(types))
    return Cluster(devices=devs, bandwidth=uniform_bandwidth(len(devs), gbps), source=source)


def _positive(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value > 0):
        raise ClusterError(f"{where}: {value!r} is not a positive finite number")
    return float(value)


def load_bandwidth(path: str | Path, n: int) -> F64:
    """An n x n matrix in Gbit/s from CSV -> bytes/s with an infinite diagonal."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterError(f"{p}: cannot read: {exc}") from None
    rows: list[list[float]] = []
    for lineno, row in enumerate(csv.reader(lines), 1):
        if not row or row[0].lstrip().startswith("#") or not "".join(row).strip():
            continue
        if len(row) != n:
            raise ClusterError(f"{p}: line {lineno}: expected {n} values (one per device), "
                               f"got {len(row)}")
        vals = []
        for col, cell in enumerate(row, 1):
            try:
                v = float(cell)
            except ValueError:
                raise ClusterError(f"{p}: line {lineno} column {col}: {cell.strip()!r} is not "
                                   "a number of Gbit/s") from None
            if len(rows) != col - 1 and not (math.isfinite(v) and v > 0):
                raise ClusterError(f"{p}: line {lineno} column {col}: bandwidth must be a "
                                   f"positive finite number of Gbit/s, not {cell.strip()!r}")
            vals.append(v * GBPS)
        rows.append(vals)
    if len(rows) != n:
        raise ClusterError(f"{p}: {len(rows)} rows, expected {n} (one per device)")
    m = np.array(rows)
    np.fill_diagonal(m, np.inf)
    return m


def from_table(data: dict[str, Any], where: str, base: Path | None = None) -> Cluster:
    unknown = set(data) - {"source", "bandwidth_gbps", "bandwidth_file", "link_latency_s",
                           "device"}
    if unknown:
        raise ClusterError(f"{where}: unknown key(s) {sorted(unknown)}; valid: source, "
                           "bandwidth_gbps, bandwidth_file, link_latency_s, device")
    entries = data.get("device")
    if not isinstance(entries, list) or not entries:
        raise ClusterError(f"{where}: needs at least one [[device]] table")
    devices: list[Device] = []
    for i, e in enumerate(entries):
        at = f"{where}: device {i}"
        if not isinstance(e, dict):
            raise ClusterError(f"{at}: expected a table")
        bad = set(e) - {"type", "count", "name", "measured_layer_times", *_FIELDS}
        if bad:
            raise ClusterError(f"{at}: unknown key(s) {sorted(bad)}")
        typ = e.get("type")
        if typ is not None and typ not in PRESETS:
            raise ClusterError(f"{at}: type {typ!r} is not one of {sorted(PRESETS)}")
        vals = dict(PRESETS[typ]) if typ else {}
        for f in _FIELDS:
            if f in e:
                vals[f] = (_positive(f"{at}: {f}", e[f]) if f != "overhead_s" or e[f] != 0
                           else 0.0)
            elif f not in vals:
                raise ClusterError(f"{at}: {f} missing (give it, or a preset type)")
        count = e.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_DEVICES:
            raise ClusterError(f"{at}: count must be a whole number in 1..{MAX_DEVICES}")
        measured = e.get("measured_layer_times", False)
        if not isinstance(measured, bool):
            raise ClusterError(f"{at}: measured_layer_times must be true or false")
        name = e.get("name", typ or f"dev{i}")
        if not isinstance(name, str) or not name.isascii() or not 0 < len(name) <= 64:
            raise ClusterError(f"{at}: name must be 1..64 ASCII characters")
        for _ in range(count):
            devices.append(Device(name=f"{name}-{len(devices)}", measured_layer_times=measured,
                                  **vals))
    if len(devices) > MAX_DEVICES:
        raise ClusterError(f"{where}: {len(devices)} devices, at most {MAX_DEVICES}")
    n = len(devices)
    if "bandwidth_file" in data and "bandwidth_gbps" in data:
        raise ClusterError(f"{where}: give bandwidth_gbps or bandwidth_file, not both")
    if "bandwidth_file" in data:
        bf = data["bandwidth_file"]
        if not isinstance(bf, str):
            raise ClusterError(f"{where}: bandwidth_file must be a path")
        bw = load_bandwidth((base or Path(".")) / bf, n)
    elif "bandwidth_gbps" in data:
        bw = uniform_bandwidth(n, _positive(f"{where}: bandwidth_gbps", data["bandwidth_gbps"]))
    else:
        raise ClusterError(f"{where}: give bandwidth_gbps or bandwidth_file")
    source = data.get("source", 0)
    if isinstance(source, bool) or not isinstance(source, int) or not 0 <= source < n:
        raise ClusterError(f"{where}: source must be a device index in 0..{n - 1}")
    lat = data.get("link_latency_s", 0.0)
    zero = isinstance(lat, int | float) and not isinstance(lat, bool) and lat == 0
    lat = 0.0 if zero else _positive(f"{where}: link_latency_s", lat)
    return Cluster(devices=tuple(devices), bandwidth=bw, source=source, link_latency_s=lat)


def load(path: str | Path) -> Cluster:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterError(f"{p}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ClusterError(f"{p}: not TOML: {exc}") from None
    return from_table(data, str(p), p.parent)


# Compute-power mixes of the sweeps (8 devices each).
MIXES: dict[str, tuple[str, ...]] = {
    "gpu": ("a100",) * 2 + ("v100",) * 2 + ("t4",) * 4,
    "mixed": ("a100", "v100", "t4", "t4") + ("cpu",) * 4,
    "cpu": ("cpu",) * 8,
}

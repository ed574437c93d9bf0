"""The GPU-sample codec for a node's `Extra` field (written by `slurm-rl agent`).

Compact JSON, no spaces, one array per GPU in a fixed column order:

    {"rl":1,"t":1764460000,"g":[[0,55,1024,81559,250.5,61],...]}

columns: index, utilisation %, memory used MiB, memory total MiB, power W, temperature °C
(null where NVML could not say). Slurm 22.05 took 4000 bytes of Extra; 8 GPUs take ~300.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from slurm_rl.core import GpuSample

VERSION = 1
MAX_EXTRA_BYTES = 4000
MAX_GPUS = 64


def encode_samples(samples: Sequence[GpuSample], sampled_at: float) -> str:
    rows = [
        [s.index, _num(s.util_pct), _num(s.mem_used_mib), _num(s.mem_total_mib),
         _num(s.power_w), _num(s.temp_c)]
        for s in samples
    ]
    text = json.dumps({"rl": VERSION, "t": int(sampled_at), "g": rows}, separators=(",", ":"))
    if len(text.encode()) > MAX_EXTRA_BYTES:
        raise ValueError(f"GPU samples take {len(text)} bytes, more than Extra's {MAX_EXTRA_BYTES}")
    return text


def decode_samples(extra: str | None) -> tuple[tuple[GpuSample, ...], float | None]:
    """Samples and their time from a node's Extra; ((), None) if it is not ours or malformed.

    Never raises: Extra is untrusted text. Every value must be a finite JSON number in bounds
    (or null), at most MAX_GPUS rows, the whole at most MAX_EXTRA_BYTES.
    """
    if not extra or not extra.startswith("{") or len(extra) > MAX_EXTRA_BYTES:
        return (), None
    try:
        data = json.loads(extra, parse_constant=_no_constant)
        if not isinstance(data, dict) or data.get("rl") != VERSION:
            return (), None
        rows, at = data["g"], data["t"]
        if not isinstance(rows, list) or len(rows) > MAX_GPUS or not _bounded(at, low=0.0):
            return (), None
        samples = []
        for row in rows:
            if (not isinstance(row, list) or len(row) != 6 or not isinstance(row[0], int)
                    or not _bounded(row[0], low=0, high=1023)
                    or not all(v is None or _bounded(v) for v in row[1:])):
                return (), None
            samples.append(GpuSample(index=int(row[0]), util_pct=row[1], mem_used_mib=row[2],
                                     mem_total_mib=row[3], power_w=row[4], temp_c=row[5]))
        return tuple(samples), float(at)
    except (ValueError, KeyError, TypeError, IndexError, RecursionError, OverflowError):
        return (), None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a sample value")


def _bounded(value: object, *, low: float = -300.0, high: float = 2.0**53) -> bool:
    """A JSON number (not a bool, not NaN or infinite) in [low, high]; temperatures may be
    below zero, hence the default `low`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return low <= value <= high


def _num(value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if float(value).is_integer() else round(float(value), 1)

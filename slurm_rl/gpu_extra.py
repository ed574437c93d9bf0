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
    """Samples and their time from a node's Extra; ((), None) if it is not ours or malformed."""
    if not extra or not extra.startswith("{"):
        return (), None
    try:
        data = json.loads(extra)
        if not isinstance(data, dict) or data.get("rl") != VERSION:
            return (), None
        samples = tuple(
            GpuSample(index=int(row[0]), util_pct=row[1], mem_used_mib=row[2],
                      mem_total_mib=row[3], power_w=row[4], temp_c=row[5])
            for row in data["g"]
        )
        return samples, float(data["t"])
    except (ValueError, KeyError, TypeError, IndexError):
        return (), None


def _num(value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if float(value).is_integer() else round(float(value), 1)

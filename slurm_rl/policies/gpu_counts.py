"""GPU counts a policy may give a job: its intent's range, and the counts in it that place well.
"""

from __future__ import annotations

from slurm_rl.core import JobView


def gpu_range(job: JobView) -> tuple[int, int] | None:
    """(min, max) GPUs when the intent gives a range wider than one count, else None."""
    it = job.intent
    if it is None or (it.gpus_min is None and it.gpus_max is None):
        return None
    lo = it.gpus_min if it.gpus_min is not None else min(job.gpus, it.gpus_max or job.gpus)
    hi = it.gpus_max if it.gpus_max is not None else max(lo, job.gpus)
    lo, hi = max(lo, 1), max(hi, 1)
    return (lo, hi) if hi > lo else None


def allowed_counts(lo: int, hi: int, node_cap: int, total: int) -> list[int]:
    """GPU counts a policy may pick in [lo, hi]: the range ends and the powers of two between
    them (as ElasticFlow, DL jobs scale in powers of two), that place as cons_tres would (within
    one node, or whole nodes) and fit the cluster; at least [lo], so a job always has a count."""
    hi = min(hi, total)
    steps = {lo, hi} | {1 << k for k in range(hi.bit_length()) if lo < 1 << k < hi}
    out = [g for g in sorted(steps) if lo <= g <= hi
           and (g <= node_cap or g % max(node_cap, 1) == 0)]
    return out or [lo]

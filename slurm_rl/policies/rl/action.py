"""How a learned policy's action becomes a Decision, shared by the training environment
(`rl/env.py`) and the live `rl` policies, over the observation of `policies/rl/features.py`.

Action: `scores` (one per shown slot; higher runs first) and, optionally, `gpu_choice` in
[0, 1] per slot, mapped linearly onto the job's GPU range (range jobs only; others keep their
count). Pending jobs not shown to the network rank after the shown ones, oldest first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobOrder, JobView
from slurm_rl.policies import ordering as _ordering  # noqa: F401 (its JobOrder check)
from slurm_rl.policies.rl.features import gpu_range, pending_in_order

_REASON = "rl: ranked by the learned score"
_REASON_UNSHOWN = "rl: not shown to the network (oldest-first cut), after the shown jobs"


def gpus_from_choice(rng: tuple[int, int], choice: float) -> int:
    """The count for `choice` in [0, 1] (clipped; NaN -> the minimum), linear over the range."""
    lo, hi = rng
    c = 0.0 if not choice == choice else min(max(float(choice), 0.0), 1.0)  # noqa: PLR0124
    return lo + int(c * (hi - lo) + 0.5)  # half up


def decision_from_scores(snapshot: ClusterSnapshot, shown_ids: Sequence[JobId],
                         scores: npt.ArrayLike, gpu_choice: npt.ArrayLike | None = None, *,
                         policy: str = "rl", pending: list[JobView] | None = None) -> Decision:
    """Rank the shown jobs by score (highest first; ties and NaN scores in slot order, NaN
    last), then every other pending job oldest first; give range jobs among the shown the GPU
    count `gpu_choice` picks (None: counts unchanged). Slots beyond `shown_ids` are ignored.
    `pending`: the snapshot's `pending_in_order`, where the caller has it."""
    n = len(shown_ids)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)[:n]
    if s.shape[0] < n:
        raise ValueError(f"{s.shape[0]} scores for {n} shown jobs")
    # by -score, then slot (a stable sort), a NaN score as -inf
    neg = [-x if x == x else math.inf for x in s.tolist()]
    order = sorted(range(n), key=neg.__getitem__)
    choice = (None if gpu_choice is None
              else np.asarray(gpu_choice, dtype=np.float64).reshape(-1)[:n])
    by_id = {j.id: j for j in snapshot.pending} if choice is not None else {}
    total = snapshot.gpus_total if choice is not None else 0
    make = JobOrder.fast  # the constructor without the dataclass's __init__: same value
    out: list[JobOrder] = []
    for rank, slot in enumerate(order):
        job_id = shown_ids[slot]
        gpus = None
        if choice is not None:
            job = by_id.get(job_id)
            rng = gpu_range(job, total) if job is not None else None
            if rng is not None:
                gpus = gpus_from_choice(rng, float(choice[slot]))
        out.append(make(job_id, rank, gpus, _REASON))
    if pending is None:
        pending = pending_in_order(snapshot)
    if n <= len(pending) and all(j.id == i for j, i in zip(pending, shown_ids, strict=False)):
        rest: Sequence[JobView] = pending[n:]  # (the shown are the first: `features`' cut)
    else:
        shown = set(shown_ids)
        rest = [j for j in pending if j.id not in shown]
    for rank, j in enumerate(rest, n):
        out.append(make(j.id, rank, None, _REASON_UNSHOWN))
    return Decision(policy=policy, order=tuple(out))

"""Ordering helpers: Slurm's default order (submit time, then job id), the managed pending
jobs in it, and turning a ranking into `JobOrder`s.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress, pairwise

from slurm_rl.core import ClusterSnapshot, JobId, JobOrder, JobView, id_key


def submit_key(job: JobView) -> tuple[float, tuple[tuple[int, str], ...]]:
    """Slurm's default order: submit time, ties by job id."""
    return (job.submit_time, id_key(job.id))


def managed_pending(snapshot: ClusterSnapshot) -> list[JobView]:
    """Pending jobs the daemon may act on, in submit order."""
    jobs = [j for j in snapshot.pending if j.managed]
    # Often in submit order already (the simulator's are), and then sorting would keep it as
    # it is: seen without building every key.
    for a, b in pairwise(jobs):  # submit_key(b) < submit_key(a), as tuples compare
        ta, tb = a.submit_time, b.submit_time
        if (id_key(b.id) < id_key(a.id)) if tb is ta or tb == ta else tb < ta:
            return sorted(jobs, key=submit_key)
    return jobs


Reason = str | Callable[[], str]
"""A JobOrder's reason, or a function that makes it when read (`core.JobOrder.reason`)."""

Ranked = tuple[JobView, Reason, int | None]
"""(job, reason, gpus or None), one pending job of a ranking."""


def orders(ranked: Iterable[Ranked], *, reuse: tuple[Sequence[Ranked], tuple[JobOrder, ...]]
           | None = None, kept: Mapping[JobId, JobOrder] | None = None
           ) -> tuple[JobOrder, ...]:
    """JobOrders with consecutive ranks from (job, reason, gpus or None) in rank order.

    `reuse`: the ranking and orders of an earlier call: its JobOrders are kept for the longest
    common prefix (the same entries, identical or equal, at the same ranks), so a ranking that
    changed at its end costs only that end.

    `kept`: JobOrders of an earlier call by job: where an entry's reason is a str and that
    job's earlier JobOrder has the same rank, GPUs and reason (already read as a str), that
    JobOrder is returned again, so that whoever stored it can tell it unchanged by identity."""
    ranked = ranked if isinstance(ranked, Sequence) else list(ranked)
    out: list[JobOrder] = []
    if reuse is not None:
        before, made = reuse
        n = min(len(ranked), len(before), len(made))
        k = 0
        while k < n and (ranked[k] is before[k] or ranked[k] == before[k]):
            k += 1
        out = list(made[:k])
    make = JobOrder.fast  # the constructor without the dataclass's __init__: same value
    for rank in range(len(out), len(ranked)):
        job, reason, gpus = ranked[rank]
        if kept is not None and type(reason) is str:
            old = kept.get(job.id)
            if old is not None and old.rank == rank and old.gpus == gpus and (
                    old.__dict__["reason"] == reason):
                out.append(old)
                continue
        out.append(make(job.id, rank, gpus, reason))
    return tuple(out)


def latest_first(jobs: list[JobView]) -> list[JobView]:
    """sorted(jobs, key=submit_key, reverse=True), building the keys only for jobs whose
    submit time another job has too."""
    times = list(map(_submit_time, jobs))
    if any(map(math.isnan, times)):
        return sorted(jobs, key=submit_key, reverse=True)
    out = sorted(jobs, key=_submit_time, reverse=True)
    if len(set(times)) < len(times):  # runs of equal times: by id, stably
        times = list(map(_submit_time, out))
        ties = list(compress(range(len(times) - 1), map(operator.eq, times, times[1:])))
        i = 0
        while i < len(ties):  # out[start:end] is one run
            start = ties[i]
            end = start + 2
            while i + 1 < len(ties) and ties[i + 1] == end - 1:
                end += 1
                i += 1
            out[start:end] = sorted(out[start:end], key=lambda j: id_key(j.id), reverse=True)
            i += 1
    return out


_submit_time = operator.attrgetter("submit_time")

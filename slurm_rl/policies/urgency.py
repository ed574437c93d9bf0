"""No buying priority with deadlines: a per-user cap on urgent GPUs.

A job is *urgent* when the policy orders it ahead of jobs without a deadline because of its
intent: in `deadline`, a deadline job that is not `besteffort` and not demoted (hard and
unreachable: already at the back) — its class, `critical` first, orders it among those; in
`edf`, any deadline job. (A `critical` job without a deadline is ordered by age in both: the
class alone buys nothing.) Running jobs count by their intent alone (urgent when they would be).

Each user may hold and ask for at most `urgent_share` of the cluster's usable GPUs with urgent
jobs at a time. The GPUs the user's urgent jobs hold now (running) count first; the pending ones
then take what is left in the policy's own order (most urgent first), each at the GPU count the
policy plans for it. A pending job that would take the user over the share is *capped*: the
policy orders it as if it had no deadline and the standard class, and says so in its reason.

The cap applies only while the managed pending jobs belong to at least two users (the empty
name counts as one): a user alone in the queue passes nobody, and keeps the order their own
deadlines give. Running jobs count only when managed (the policy's scope: it boosted no other).

Jobs without a user (the empty name: a trace that has no user column, as the ITP traces) are
never capped: who asks cannot be told apart, so there is no one to be fair between; the policy
keeps the order it gave before the cap existed.

Pure: the snapshot's views and the policy's ranking in, the capped positions out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence

from slurm_rl.core import ClusterSnapshot, Intent
from slurm_rl.states import ServiceClass

DEFAULT_SHARE = 0.25
"""The default `urgent_share` of `deadline` and `edf`."""


def check_share(share: object) -> None:
    """ValueError unless `share` is a number in (0, 1] (1: one user's urgent jobs may take the
    whole cluster, which still caps what asks for more)."""
    ok = (isinstance(share, int | float) and not isinstance(share, bool)
          and math.isfinite(share) and 0 < share <= 1)
    if not ok:
        raise ValueError(f"urgent_share must be a number in (0, 1], got {share!r}")


Urgent = Callable[[Intent | None], bool]
"""Whether a job with this intent is ordered ahead of jobs without one (by the policy's rule)."""


def deadline_not_besteffort(intent: Intent | None) -> bool:
    """`deadline`'s urgent jobs: a deadline and not the besteffort class. (The critical class
    alone orders nothing there: a critical job without a deadline waits by age.)"""
    return (intent is not None and intent.deadline is not None
            and intent.service_class is not ServiceClass.BESTEFFORT)


def has_deadline(intent: Intent | None) -> bool:
    """`edf`'s urgent jobs: any with a deadline (it reads no class)."""
    return intent is not None and intent.deadline is not None


def held(snapshot: ClusterSnapshot, users: Iterable[str], urgent: Urgent) -> dict[str, int]:
    """GPUs that managed running urgent jobs of `users` hold now, per user (only users who
    hold some)."""
    wanted = set(users)
    out: dict[str, int] = {}
    for j in snapshot.running:
        if j.user in wanted and j.managed and urgent(j.intent):
            out[j.user] = out.get(j.user, 0) + j.gpus
    return out


def capped(ranked: Sequence[tuple[str, int]], held_now: dict[str, int], budget: float,
           waiting: Collection[str]) -> list[int]:
    """Positions in `ranked` ((user, GPUs) of urgent pending jobs, in the policy's order) that
    would take their user over `budget` GPUs, counting `held_now` first. A job that does not fit
    takes nothing, so a later, smaller one of the same user may still fit. The empty user is
    never capped; nobody is while `waiting` (the users of all managed pending jobs, a set) holds
    fewer than two."""
    if len(waiting) < 2:
        return []
    used = dict(held_now)
    out = []
    for i, (user, gpus) in enumerate(ranked):
        if not user:
            continue
        total = used.get(user, 0) + gpus
        if total > budget:
            out.append(i)
        else:
            used[user] = total
    return out


def capped_in(snapshot: ClusterSnapshot, ranked: Sequence[tuple[str, int]], urgent: Urgent,
              share: float, waiting: Collection[str]) -> list[int]:
    """`capped` for a policy's decision: what the user's running urgent jobs hold and the
    budget are read from `snapshot` only when the cap can apply (two users waiting), so that a
    decision it can not touch reads no running job."""
    if len(waiting) < 2:
        return []
    users = {user for user, _ in ranked if user}
    return capped(ranked, held(snapshot, users, urgent), budget(snapshot, share), waiting)


def budget(snapshot: ClusterSnapshot, share: float) -> float:
    """Urgent GPUs one user may hold and ask for: `share` of the cluster's usable GPUs."""
    return share * snapshot.gpus_total


def capped_reason(user: str, share: float, was: str) -> str:
    """The reason of a capped job: why, and what the policy would have said without the cap."""
    return (f"urgent share of user {user} over {share * 100:.4g} %: ordered as standard, "
            f"no deadline (uncapped: {was})")

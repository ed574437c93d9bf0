"""The capability contract, held on the daemon's side as the simulator holds it
(sim/engine.py stops a run on it): a policy's Resizes and Preempts are acted on only if the
policy declares them (`capabilities.Resizing`, `capabilities.Preempting`) and each names a
running job that the policy's own `may_resize` / `may_preempt` accepts. What it may not do is
dropped, with one note a kind, and the rest of the decision (the order, GPU counts of pending
jobs, the other entries) stands: one bad entry never stops the cycle for the other jobs.

Pure: a policy, its decision and the snapshot in; the decision to act on out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView, Policy, Preempt, Resize
from slurm_rl.policies.capabilities import Preempting, Resizing

_Entry = TypeVar("_Entry", Resize, Preempt)


def within_capabilities(policy: Policy, decision: Decision, snapshot: ClusterSnapshot
                        ) -> Decision:
    """`decision` less the resizes and preemptions `policy` may not make (module docstring),
    with a note for each kind refused."""
    if not (decision.resizes or decision.preemptions):
        return decision
    jobs = {j.id: j for j in snapshot.jobs}
    notes: list[str] = []
    resizes = _allowed(policy, decision.resizes, jobs, "resize", notes,
                       policy.may_resize if isinstance(policy, Resizing) else None, "Resizing")
    preempts = _allowed(policy, decision.preemptions, jobs, "preempt", notes,
                        policy.may_preempt if isinstance(policy, Preempting) else None,
                        "Preempting")
    if not notes:
        return decision
    return replace(decision, resizes=tuple(resizes), preemptions=tuple(preempts),
                   notes=(*decision.notes, *notes))


def _allowed(policy: Policy, entries: Sequence[_Entry], jobs: dict[JobId, JobView], what: str,
             notes: list[str], may: Callable[[JobView], bool] | None, capability: str
             ) -> list[_Entry]:
    if not entries:
        return []
    if may is None:
        notes.append(f"policy {policy.name} returned {len(entries)} {what}(s) without declaring "
                     f"{capability} (slurm_rl.policies.capabilities): none acted on")
        return []
    kept, refused = [], []
    for e in entries:
        job = jobs.get(e.job_id)
        if job is not None and job.state.is_running and may(job):
            kept.append(e)
        else:
            refused.append(e.job_id)
    if refused:
        shown = ", ".join(refused[:5]) + (f" and {len(refused) - 5} more" if len(refused) > 5
                                           else "")
        notes.append(f"policy {policy.name}: {what} of {shown} refused (not a running job its "
                     f"may_{what} accepts)")
    return kept

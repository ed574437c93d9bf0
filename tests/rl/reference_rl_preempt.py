"""The straightforward preempting `rl` (as first shipped, commit 9cf74db): at every decision
point where a managed pending job fits or one arrived, it scores every pending job shown and
every preemptable running job in one network call and plans over the whole queue. The
reference the bounded policy (`policies/rl/preempting.py`) is compared against; not a fake: the
same network, features and planner."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slurm_rl.core import ClusterSnapshot, Decision, JobView
from slurm_rl.policies.capacity import Capacity, job_parts
from slurm_rl.policies.preemption import may_preempt, plan_preemptions
from slurm_rl.policies.rl import LearnedOrder
from slurm_rl.policies.rl.action import decision_from_scores
from slurm_rl.policies.rl.features import features, running_rows


@dataclass(frozen=True, kw_only=True)
class StraightforwardRL(LearnedOrder):
    preempt_margin: float = 0.0

    def may_preempt(self, job: JobView) -> bool:
        return may_preempt(job)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        if not worth_deciding(snapshot):
            return Decision(policy=self.name)
        f = features(snapshot, self._fcfg, cache=self._rows)
        n = len(f.shown_ids)
        if n == 0:
            return decision_from_scores(snapshot, f.shown_ids, [], policy=self.name)
        stoppable = [v for v in snapshot.running if may_preempt(v)]
        rows = f.job_feats[:n]
        if stoppable:
            rows = np.concatenate([rows, running_rows(snapshot, stoppable, cache=self._rows)])
        s = self.scores(rows, f.cluster_feats, snapshot.time)
        d = decision_from_scores(snapshot, f.shown_ids, s[:n], policy=self.name)
        if not stoppable:
            return d
        score = dict(zip(f.shown_ids, s[:n].tolist(), strict=True))
        score.update(zip((v.id for v in stoppable), s[n:].tolist(), strict=True))
        by_id = {j.id: j for j in snapshot.pending}
        movers = [by_id[o.job_id] for o in d.order[:n] if not by_id[o.job_id].held]
        victims = sorted(stoppable, key=lambda v: (score[v.id], -v.submit_time))
        m = self.preempt_margin
        pre, _ = plan_preemptions(
            Capacity.of(snapshot), movers, victims,
            outranks=lambda p, v: score[p.id] > score[v.id] + m,
            reason=lambda v, p: (f"rl: score {score[v.id]:.3g} < {score[p.id]:.3g} - {m:g} "
                                 f"of job {p.id} ({p.gpus} GPUs)"))
        return Decision(policy=d.policy, order=d.order, preemptions=pre) if pre else d


def worth_deciding(snapshot: ClusterSnapshot) -> bool:
    """Some managed pending job fits the free GPUs now, or one arrived at this instant."""
    now = snapshot.time
    free: Capacity | None = None
    looked = False
    tried: set[tuple[int, int]] = set()
    for j in snapshot.pending:
        if not j.managed or j.held:
            continue
        if j.submit_time == now:
            return True
        if not looked:
            looked = True
            cap = Capacity.of(snapshot)
            free = cap if cap.fits((1,)) else None
        if free is None:
            continue
        key = (j.gpus, j.nodes)
        if key not in tried:
            if free.fits(job_parts(j, None, free.node_cap)):
                return True
            tried.add(key)
    return False


def nothing_fits(snapshot: ClusterSnapshot) -> bool:
    """No managed, not held pending job fits the free GPUs now."""
    cap = Capacity.of(snapshot)
    return not any(cap.fits(job_parts(j, None, cap.node_cap)) for j in snapshot.pending
                   if j.managed and not j.held)

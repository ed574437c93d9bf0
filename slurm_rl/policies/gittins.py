"""`gittins`: the Gittins index of each job's attained service, per GPU, PREEMPTIVE.

Non-clairvoyant, after the Gittins-index policy Tiresias (Gu et al., NSDI'19) builds on, here
per job rather than in discretised queues: a job's priority is G(a) / GPUs, with G the Gittins
index (1/s) of the duration distribution of the training traces' jobs in the job's GPU-count
bucket (`slurm_rl.gittins_table`, shipped and rebuilt by `slurm-rl gittins-table build`), and a
its attained run time at its current count. Higher priority first; ties by submit time.

Attained run time is what a live cluster shows: attained_gpu_s / gpus (GPU-seconds held, across
restarts) minus `restart_cost_s` per restart (time held without progress); never a true
duration.

Preemption as `srtf-oracle` plans it (`plan_preemptions`): a pending job that does not fit
requeues running jobs of lower priority, lowest first, until it fits. Against thrashing (an
index falls as a job runs, so two jobs could swap at every call, each swap paying a restart),
a pending job displaces a running one only if its priority is more than (1 + `margin`) times
the running job's, as Tiresias keeps a running job from being preempted by one of its own queue.

Stateless; never changes GPU counts; reads `gpus`, `attained_gpu_s`, `restarts`,
`submit_time`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurm_rl import gittins_table
from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobState, JobView
from slurm_rl.gittins_table import GittinsTable
from slurm_rl.policies.capacity import Capacity
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import managed_pending, orders, submit_key
from slurm_rl.policies.preemption import plan_preemptions

NAME = "gittins"


@dataclass(frozen=True, kw_only=True)
class Gittins:
    name: str = field(default=NAME, init=False)
    table: str | None = None
    """Path of a table CSV (`slurm-rl gittins-table build --out`); None: the shipped one, built
    from the training clusters."""
    margin: float = 1.0
    """Preempt a running job only if the pending job's priority exceeds (1 + margin) times its
    own (0: whenever higher)."""
    restart_cost_s: float = 30.0
    """Seconds per restart held without progress (the simulator's default restart delay), taken
    off the attained run time."""
    _table: GittinsTable = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.margin < 0:
            raise ValueError(f"margin must be >= 0, got {self.margin}")
        if self.restart_cost_s < 0:
            raise ValueError(f"restart_cost_s must be >= 0, got {self.restart_cost_s}")
        t = gittins_table.shipped() if self.table is None else gittins_table.read(self.table)
        object.__setattr__(self, "_table", t)

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): managed, plainly RUNNING jobs (not completing,
        resizing or suspended)."""
        return job.managed and job.state is JobState.RUNNING

    def attained_s(self, job: JobView) -> float:
        """Run time so far at the job's count, restarts' lost time taken off."""
        ran = job.attained_gpu_s / max(job.gpus, 1) - job.restarts * self.restart_cost_s
        return ran if ran > 0.0 else 0.0

    def priority(self, job: JobView) -> tuple[float, float, str]:
        """(index / GPUs, attained s, bucket)."""
        a = self.attained_s(job)
        index, bucket = self._table.lookup(job.gpus, a)
        return index / max(job.gpus, 1), a, bucket

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        jobs = managed_pending(snapshot)
        prio: dict[JobId, float] = {}
        why: dict[JobId, str] = {}
        for j in jobs:
            p, a, b = self.priority(j)
            prio[j.id] = p
            why[j.id] = (f"gittins index {p * max(j.gpus, 1):.3g}/s at attained {a:.0f} s "
                         f"(bucket {b}), /{j.gpus} GPUs")
        # (sorted is stable and jobs come in submit order: ties stay in it)
        ranked = sorted(jobs, key=lambda j: -prio[j.id])
        running: dict[JobId, float] = {}

        def victims() -> list[JobView]:  # (asked only if some pending job does not fit)
            stoppable = [j for j in snapshot.running if self.may_preempt(j)]
            for v in stoppable:
                running[v.id] = self.priority(v)[0]
            # lowest priority first; ties: latest submitted first
            return sorted(stoppable, key=lambda v: (-running[v.id], submit_key(v)),
                          reverse=True)

        k = 1.0 + self.margin
        preempts, _ = plan_preemptions(
            Capacity.of(snapshot),
            [j for j in ranked if not j.held],
            victims,
            outranks=lambda p, v: prio[p.id] > k * running[v.id],
            reason=lambda v, p: (f"gittins: priority {running[v.id]:.3g} < {prio[p.id]:.3g} "
                                 f"/ {k:g} of job {p.id} ({p.gpus} GPUs); {why[p.id]}"),
        )
        return Decision(policy=self.name, order=orders((j, why[j.id], None) for j in ranked),
                        preemptions=preempts)


def new(**options: Any) -> Gittins:
    """Options: table (shipped), margin (1.0), restart_cost_s (30.0)."""
    return build(Gittins, options)

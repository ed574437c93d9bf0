"""The live daemon's restart rules, as the simulator applies them (`EngineConfig.restart_rules`):
which preemption or resize the daemon would carry out now. The engine asks before it makes a
restart and tells this object which ones it made and which it took back.

- Only jobs that opted in (`--rl-elastic`: `SimJob.restartable`) are restarted.
- At most `max_restarts_per_hour` restarts of one job in any hour.
- A resize must pass the daemon's gain rule (`policies.restart_gate.restart_gain`): a grow must
  win more than the restart costs, a shrink must not hit a job that finishes within it.
"""

from __future__ import annotations

from slurm_rl.core import JobId
from slurm_rl.policies.restart_gate import HOUR_S, restart_gain
from slurm_rl.sim.jobs import SimJob
from slurm_rl.sim.views import running_view


class RestartRules:
    """Each job's restart times within the last hour, and the judgement on a new restart."""

    def __init__(self, max_per_hour: int, cost_s: float) -> None:
        self.max_per_hour, self.cost_s = max_per_hour, cost_s
        self._log: dict[JobId, list[float]] = {}

    def refused(self, job: SimJob, gpus: int | None, now: float) -> str:
        """Why the daemon would not restart `job` at `now` (a preemption: `gpus` None; a resize
        to `gpus`), or "" if it would."""
        if not job.restartable:  # (under the rules: whether it opted in, sim/jobs.py)
            return "not opted in (--rl-elastic)"
        log = self._log.setdefault(job.id, [])
        while log and log[0] <= now - HOUR_S:
            log.pop(0)
        if len(log) >= self.max_per_hour:
            return "max_restarts_per_hour"
        if gpus is not None:
            fresh = job.view_static is None  # the snapshot builder reads that as a new run
            view = running_view(job.run_static(), now)
            if fresh:
                job.view_static = None
            if restart_gain(view, gpus, now=now, cost_s=self.cost_s).why:
                # one note kind per rule (the reason's figures vary job by job)
                return ("the predicted gain does not beat the restart delay" if gpus > job.gpus
                        else "finishes within the restart delay (or no prediction)")
        return ""

    def made(self, job_id: JobId, now: float) -> None:
        """A restart made at `now`: it counts against the hourly cap."""
        self._log.setdefault(job_id, []).append(now)

    def unmade(self, job_id: JobId) -> None:
        """The job's last restart did not happen after all (or is judged again): not counted."""
        if log := self._log.get(job_id):
            log.pop()

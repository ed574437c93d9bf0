"""The incremental poll, on squeue/sinfo output recorded from the 22.05 test cluster."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from slurm_rl.daemon.poll import Poller
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.parse import parse_squeue
from slurm_rl.slurm.runner import CommandResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
SQUEUE = (FIXTURES / "squeue-22.05.txt").read_text()
SINFO = (FIXTURES / "sinfo-22.05.txt").read_text()


class Recorded:
    """Replays recorded output: `squeue` gives `self.squeue`, `sinfo` the recorded nodes."""

    def __init__(self, squeue: str) -> None:
        self.squeue = squeue

    def run(self, args: Sequence[str], *, timeout_s: float | None = None) -> CommandResult:
        out = self.squeue if args[0] == "squeue" else SINFO
        return CommandResult(args=tuple(args), returncode=0, stdout=out, stderr="",
                             duration_s=0.0)


def test_only_changed_lines_are_new_once_committed() -> None:
    runner = Recorded(SQUEUE)
    poller = Poller(SlurmAdapter(runner))
    first = poller.poll(now=2e9)
    everything = {r.job_id for r in parse_squeue(SQUEUE)}
    assert {j.id for j in first.jobs} == everything
    assert {j.id for j in first.changed} == everything
    assert len(first.nodes) == 4
    # Not committed (the database write failed): still all new.
    assert {j.id for j in poller.poll(now=2e9).changed} == everything
    poller.commit(first)
    assert poller.poll(now=2e9 + 10).changed == ()

    lines = SQUEUE.splitlines()
    lines[0] = lines[0].replace("CANCELLED", "COMPLETED", 1)
    runner.squeue = "\n".join(lines) + "\n"
    again = poller.poll(now=2e9 + 20)
    (changed,) = again.changed
    assert changed.id == parse_squeue(lines[0])[0].job_id
    assert {j.id for j in again.jobs} == everything


def test_running_jobs_get_views_at_the_new_time() -> None:
    poller = Poller(SlurmAdapter(Recorded(SQUEUE)))
    poller.commit(poller.poll(now=2e9))
    later = poller.poll(now=2e9 + 100)
    running = [j for j in later.jobs if j.state.is_running]
    assert running
    for job in running:
        assert job.start_time is not None
        assert job.attained_gpu_s == (2e9 + 100 - job.start_time) * job.gpus

"""The Slurm adapter: polls squeue/sinfo through one Runner into the core types."""

from __future__ import annotations

from collections.abc import Callable

from slurm_rl.core import ClusterSnapshot, JobView, NodeView
from slurm_rl.slurm.parse import (
    SINFO_FIELDS,
    SQUEUE_FIELDS,
    SqueueRecord,
    build_snapshot,
    format_option,
    job_view,
    parse_sinfo_nodes,
    parse_squeue,
)
from slurm_rl.slurm.runner import CommandResult, Runner, SubprocessRunner, check

ScopeRule = Callable[[SqueueRecord, bool], bool]


def rlsbatch_scope(record: SqueueRecord, has_intent: bool) -> bool:
    """Default scope: only jobs submitted through rlsbatch (their comment carries an intent)."""
    return has_intent


def partitions_scope(partitions: frozenset[str]) -> ScopeRule:
    """Admin scope: every job in the listed partitions, as a priority plugin would."""

    def rule(record: SqueueRecord, has_intent: bool) -> bool:
        return record.partition in partitions

    return rule


class SlurmAdapter:
    def __init__(self, runner: Runner | None = None, scope: ScopeRule = rlsbatch_scope) -> None:
        self.runner = runner or SubprocessRunner()
        self.scope = scope
        self._squeue_fmt = format_option(SQUEUE_FIELDS)
        self._sinfo_fmt = format_option(SINFO_FIELDS)

    def squeue(self) -> CommandResult:
        # -a: all partitions (hidden ones too); -t all: include jobs that just ended, so the
        # daemon sees every completion while slurmctld still remembers it (MinJobAge).
        return check(self.runner.run(["squeue", "-h", "-a", "-t", "all", "-O", self._squeue_fmt]))

    def sinfo(self) -> CommandResult:
        return check(self.runner.run(["sinfo", "-h", "-N", "-O", self._sinfo_fmt]))

    def poll_records(self) -> list[SqueueRecord]:
        return parse_squeue(self.squeue().stdout)

    def poll_jobs(self, now: float) -> list[JobView]:
        return [job_view(r, now, self.scope) for r in self.poll_records()]

    def poll_nodes(self) -> list[NodeView]:
        return parse_sinfo_nodes(self.sinfo().stdout)

    def snapshot(self, now: float) -> ClusterSnapshot:
        """Active jobs (pending and running) and all nodes, as policies see them."""
        jobs = [j for j in self.poll_jobs(now) if not j.state.is_finished]
        return build_snapshot(now, jobs, self.poll_nodes())

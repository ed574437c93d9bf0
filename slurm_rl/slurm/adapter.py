"""The Slurm adapter: polls squeue/sinfo through one Runner into the core types."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from slurm_rl.core import ClusterSnapshot, JobView, NodeView
from slurm_rl.slurm.framing import Framing, new_field_mark
from slurm_rl.slurm.parse import (
    SINFO_FIELDS,
    SQUEUE_FIELDS,
    SinfoParse,
    SqueueParse,
    SqueueRecord,
    build_snapshot,
    job_view,
    parse_sinfo_nodes,
    parse_squeue,
)
from slurm_rl.slurm.runner import CommandResult, EnvRunner, SubprocessRunner, check

ScopeRule = Callable[[SqueueRecord, bool], bool]

# squeue/sinfo read these from the environment; inherited from whoever started the daemon they
# would change what a poll selects or prints (SQUEUE_FORMAT even wins over SQUEUE_FORMAT2).
_SQUEUE_ENV = ("SQUEUE_ACCOUNT", "SQUEUE_ALL", "SQUEUE_ARRAY", "SQUEUE_ARRAY_UNIQUE",
               "SQUEUE_FEDERATION", "SQUEUE_FORMAT", "SQUEUE_LICENSES", "SQUEUE_LOCAL",
               "SQUEUE_NAMES", "SQUEUE_PARTITION", "SQUEUE_PRIORITY", "SQUEUE_QOS",
               "SQUEUE_SIB", "SQUEUE_SIBLING", "SQUEUE_SORT", "SQUEUE_STATES", "SQUEUE_USERS")
_SINFO_ENV = ("SINFO_ALL", "SINFO_FEDERATION", "SINFO_FORMAT", "SINFO_LOCAL",
              "SINFO_PARTITION", "SINFO_SORT")


def rlsbatch_scope(record: SqueueRecord, has_intent: bool) -> bool:
    """Default scope: only jobs submitted through rlsbatch (their comment carries an intent)."""
    return has_intent


def partitions_scope(partitions: frozenset[str]) -> ScopeRule:
    """Admin scope: every job in the listed partitions, as a priority plugin would."""

    def rule(record: SqueueRecord, has_intent: bool) -> bool:
        return record.partition in partitions

    return rule


class SlurmAdapter:
    """Each squeue poll draws a fresh record mark and keeps this adapter's field mark; each
    sinfo poll draws both afresh (its marks are on the command line). `framing` is given
    only by tests that replay recorded output."""

    def __init__(self, runner: EnvRunner | None = None, scope: ScopeRule = rlsbatch_scope,
                 *, framing: Callable[[], Framing] | None = None) -> None:
        self.runner = runner or SubprocessRunner()
        self.scope = scope
        field_mark = new_field_mark()
        self.new_framing: Callable[[], Framing] = framing or (
            lambda: Framing.fresh(field_mark))
        self._sinfo_framing: Callable[[], Framing] = framing or Framing.fresh

    def squeue(self, framing: Framing) -> CommandResult:
        # -a: all partitions (hidden ones too); -t all: include jobs that just ended, so the
        # daemon sees every completion while slurmctld still remembers it (MinJobAge).
        # The format (with the marks) goes in the environment, never on the command line.
        env: dict[str, str | None] = {k: None for k in _SQUEUE_ENV}
        env |= {"SQUEUE_FORMAT2": framing.format_option(SQUEUE_FIELDS),
                "SLURM_TIME_FORMAT": "standard"}
        return check(self.runner.run(["squeue", "-h", "-a", "-t", "all"], env=env))

    def sinfo(self, framing: Framing) -> CommandResult:
        # sinfo 22.05 reads no -O format from the environment, so these marks are on the
        # command line; Extra, its only free-text field, is written by operators (the agent).
        env: Mapping[str, str | None] = {k: None for k in _SINFO_ENV} | {
            "SLURM_TIME_FORMAT": "standard"}
        return check(self.runner.run(
            ["sinfo", "-h", "-N", "-O", framing.format_option(SINFO_FIELDS)], env=env))

    def poll_squeue(self) -> SqueueParse:
        framing = self.new_framing()
        return parse_squeue(self.squeue(framing).stdout, framing)

    def poll_sinfo(self) -> SinfoParse:
        framing = self._sinfo_framing()
        return parse_sinfo_nodes(self.sinfo(framing).stdout, framing)

    def poll_records(self) -> list[SqueueRecord]:
        """The records that parsed (quarantined ones are left out: see `poll_squeue`)."""
        return list(self.poll_squeue().records)

    def poll_jobs(self, now: float) -> list[JobView]:
        """Views of the records that parsed and whose comment could be interpreted."""
        views = []
        for record in self.poll_records():
            try:
                views.append(job_view(record, now, self.scope))
            except Exception:  # noqa: BLE001, S112 - the Poller reports these; here, skip
                continue
        return views

    def poll_nodes(self) -> list[NodeView]:
        return list(self.poll_sinfo().nodes)

    def snapshot(self, now: float) -> ClusterSnapshot:
        """Active jobs (pending and running) and all nodes, as policies see them."""
        jobs = [j for j in self.poll_jobs(now) if not j.state.is_finished]
        return build_snapshot(now, jobs, self.poll_nodes())

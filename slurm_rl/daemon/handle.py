"""What the service around the loop (SIGHUP reload, Prometheus metrics: service.py,
metrics.py) may see and change of the running `Daemon` (loop.py), as a small interface the
Daemon offers, so that neither imports the loop: the loop imports them (its hooks), never the
other way round. Also the daemon's options, which both sides read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.orm import Session

from slurm_rl.config import Actuation, ClaimsConfig, ResizeConfig, SizingConfig
from slurm_rl.core import Policy
from slurm_rl.daemon.actuator import RankScale
from slurm_rl.daemon.trust import Grants


@dataclass(frozen=True, kw_only=True)
class DaemonOptions:
    dry_run: bool = False
    actuation: Actuation = Actuation.SITE_FACTOR
    scale: RankScale = field(default_factory=RankScale)
    failpoint: str | None = None
    retention_days: float = 14.0
    """[database] retention_days: older decisions, samples, events, actions are pruned."""
    prune_batch: int = 2000
    """[database] prune_batch: the most rows pruned per table per cycle."""
    grants: Grants = field(default_factory=Grants)
    """[trust]: what the site grants (classes, deadline horizon)."""
    resize: ResizeConfig = field(default_factory=ResizeConfig)
    """[resize]: live resizes and preemptions of running elastic jobs (resize.py, preempt.py)."""
    sizing: SizingConfig = field(default_factory=SizingConfig)
    """[sizing]: deadline-only jobs, sized and released by the daemon (sizing.py)."""
    claims: ClaimsConfig = field(default_factory=ClaimsConfig)
    """[claims]: how jobs are held to the sizes they claim (claims.py)."""


class DaemonHandle(Protocol):
    """The running daemon as the service sees it: its policy and options (read), its database
    sessions (read-only use: metrics counts rows), and `reconfigure`, the one way to change
    them from outside (SIGHUP)."""

    @property
    def policy(self) -> Policy: ...

    @property
    def options(self) -> DaemonOptions: ...

    @property
    def sessions(self) -> Callable[[], Session]: ...

    def reconfigure(self, *, policy: Policy | None, options: DaemonOptions) -> None:
        """From the next cycle on: `policy` (None: keep the running one) and `options` (a new
        trust grant rebuilds the gate)."""
        ...

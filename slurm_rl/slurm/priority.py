"""The priority settings slurmctld runs with, from `scontrol show config` (pure parser).

The daemon's order reaches Slurm as a number added to each managed job's priority; how far that
number may go without overriding fair share between users depends on the weights the live
controller uses, which may differ from any slurm.conf on the daemon's host (a reconfigured
controller, a configless cluster). So the daemon asks slurmctld.
"""

from __future__ import annotations

from dataclasses import dataclass

MULTIFACTOR = "priority/multifactor"


@dataclass(frozen=True, kw_only=True)
class PrioritySettings:
    """What of slurmctld's priority configuration the daemon's band depends on."""

    type: str
    """`PriorityType`: only priority/multifactor adds a SiteFactor, and weighs fair share."""
    weight_fairshare: int
    """`PriorityWeightFairShare`: a job's fair-share part is its association's factor (0..1)
    times this, rounded down."""

    @property
    def fairshare_weighted(self) -> bool:
        return self.type == MULTIFACTOR and self.weight_fairshare > 0


class ShowConfigError(ValueError):
    """`scontrol show config` output that lacks or garbles a setting the daemon needs."""


def parse_priority_settings(show_config: str) -> PrioritySettings:
    """The settings from `scontrol show config` output ("Key = value" lines, 22.05)."""
    values: dict[str, str] = {}
    for line in show_config.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values.setdefault(key.strip(), value.strip())
    ptype = values.get("PriorityType")
    if not ptype:
        raise ShowConfigError("scontrol show config names no PriorityType")
    raw = values.get("PriorityWeightFairShare", "0")
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 10:
        raise ShowConfigError(f"scontrol show config: PriorityWeightFairShare = {raw[:40]!r} "
                              "is not a count")
    return PrioritySettings(type=ptype, weight_fairshare=int(raw))

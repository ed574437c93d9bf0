"""Fair share between users: how high the daemon's SiteFactor values may go (pure).

Every managed job gets a SiteFactor from the daemon's `RankScale` (rank 0: `top`); unmanaged
jobs keep 0. Multifactor priority adds it to the fair-share part, PriorityWeightFairShare times
the association's factor (0..1). Were `top` larger than that weight, one user flooding managed
jobs would pass every other user's, whatever their fair share. The rule:

    top <= PriorityWeightFairShare / FAIRSHARE_MARGIN

so that a user whose fair-share factor is more than 1/FAIRSHARE_MARGIN (0.01) above another's
goes first, whatever the daemon ranks; among one user's jobs the fair-share part is the same
and the daemon's order decides alone. Where the weight is too small for the default top, the
band is scaled down to fit (one warning line): scaling keeps the order among the daemon's jobs
exactly as long as `top` leaves room for every value `RankScale` hands out (`min_top`); below
that the daemon refuses to start, since its order could no longer be applied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from slurm_rl.config import Actuation
from slurm_rl.daemon.actuator import RankScale
from slurm_rl.slurm.priority import PrioritySettings

FAIRSHARE_MARGIN = 100
"""PriorityWeightFairShare must be at least this many times the daemon's top value."""

BUCKETS_KEPT = 21
"""Doubling buckets `min_top` keeps distinct: ranks below distinct * 2**21 (67 million with
distinct 32) get values in the same order as with the default scale."""


def min_top(scale: RankScale) -> int:
    """The smallest top for which SCALE's values stay in the same order (distinct values for
    the distinct ranks, one per bucket of the first BUCKETS_KEPT) as with any larger top: the
    last kept bucket gets the floor."""
    return scale.floor + scale.distinct + BUCKETS_KEPT - 1


@dataclass(frozen=True, kw_only=True)
class BandFit:
    """The scale to use, and what to tell the admin about it."""

    scale: RankScale
    warning: str | None = None
    """One line to log: the band was scaled down, or the bound does not hold."""
    refusal: str | None = None
    """One line: the weight is too small to hold the daemon's order; at start the daemon
    refuses, on SIGHUP it keeps fair share first (`scale` is the band that fits, however
    coarse)."""


def fit_band(scale: RankScale, settings: PrioritySettings | None, actuation: Actuation,
             unknown_reason: str = "") -> BandFit:
    """SCALE fitted under slurmctld's fair-share weight (SETTINGS; None: not readable, then
    the smallest band that keeps the order, until the next SIGHUP)."""
    if actuation is Actuation.PRIORITY:
        if settings is not None and settings.fairshare_weighted:
            return BandFit(scale=scale, warning=(
                "actuation priority replaces each managed job's priority, its fair-share part "
                f"(PriorityWeightFairShare={settings.weight_fairshare}) included: one user's "
                "managed jobs can pass every other user's; site_factor keeps fair share first"))
        return BandFit(scale=scale)
    if settings is None:
        small = replace(scale, top=min(scale.top, min_top(scale)))
        return BandFit(scale=small, warning=(
            f"slurmctld's PriorityWeightFairShare is unknown ({unknown_reason or 'not read'}): "
            f"SiteFactor band {small.top} (the smallest that keeps the order) until SIGHUP"))
    if not settings.fairshare_weighted:
        return BandFit(scale=scale)
    weight = settings.weight_fairshare
    bound = weight // FAIRSHARE_MARGIN
    if scale.top <= bound:
        return BandFit(scale=scale)
    fitted = replace(scale, top=max(scale.floor, bound))
    need = min_top(scale)
    if bound < need:
        return BandFit(scale=fitted, refusal=(
            f"slurmctld's PriorityWeightFairShare={weight} is too small for slurm-rl's order: "
            f"it must be at least {FAIRSHARE_MARGIN * need} ({FAIRSHARE_MARGIN} x the "
            f"smallest SiteFactor band, {need}), so that fair share still decides between "
            "users (docs/admin.md, Fair share between users)"))
    return BandFit(scale=fitted, warning=(
        f"SiteFactor band scaled down from {scale.top} to {fitted.top}: slurmctld's "
        f"PriorityWeightFairShare={weight} must stay at least {FAIRSHARE_MARGIN} x the band, so "
        f"that fair share decides between users (set it to {FAIRSHARE_MARGIN * scale.top} or "
        "more for the full band)"))

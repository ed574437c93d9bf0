"""Policy registry: policies are found through the entry-point group `slurm_rl.policies`
(name = module:factory), the shipped ones too (setup.cfg), so a site adds its own by installing
a package that declares one (docs/policies.md). Each shipped module exports `NAME` and
`new(**options)`.

Listing names reads package metadata only: a policy's module, and its heavy dependencies
(torch, for the RL policy), load only when that policy is built.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

from slurm_rl.core import Policy

GROUP = "slurm_rl.policies"
"""The entry-point group policies register under."""

ORACLE_SUFFIX = "-oracle"


def _entry_points() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        # The same distribution may be seen twice on sys.path (an editable install): one
        # name is one policy only if every registration points at the same factory.
        other = found.setdefault(ep.name, ep)
        if other.value != ep.value:
            raise ValueError(f"policy {ep.name!r} registered twice: {other.value} and {ep.value}")
    return found


def names() -> tuple[str, ...]:
    """Registered policy names, in registration order (no policy module is imported)."""
    return tuple(_entry_points())


def oracles() -> frozenset[str]:
    """Registered policies that read true durations (`capabilities.OracleReading`), by their
    name's `-oracle` suffix; the conformance test checks that the two agree."""
    return frozenset(n for n in names() if n.endswith(ORACLE_SUFFIX))


ORACLES = oracles()
"""`oracles()` at import: references, not schedulers."""


def make(name: str, **options: Any) -> Policy:
    """Build a policy by name; unknown names raise ValueError listing the valid ones."""
    eps = _entry_points()
    if name not in eps:
        raise ValueError(f"unknown policy {name!r} (valid: {', '.join(eps)})")
    factory = eps[name].load()
    policy: Policy = factory(**options)
    return policy

"""Building a policy from `new(**options)`: unknown options refused with the valid ones."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def build(cls: type[T], options: dict[str, Any]) -> T:
    """Construct a policy dataclass from `new(**options)`, rejecting unknown keys by name."""
    valid = sorted(f.name for f in dataclasses.fields(cls) if f.init)  # type: ignore[arg-type]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)} "
                         f"(valid: {', '.join(valid) or 'none'})")
    return cls(**options)

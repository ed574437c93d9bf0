"""What slurm-rl's commands share: how they log, and how they read KEY=VALUE policy options.
Below every command (the daemon's, the agent's, replay's), so that none imports another's CLI.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any


def setup_logging(verbose: bool = False) -> None:
    """Timestamped lines on stderr (rich's handler on a terminal)."""
    level = logging.DEBUG if verbose else logging.INFO
    root = logging.getLogger("slurm_rl")
    root.setLevel(level)
    if root.handlers:
        return
    handler: logging.Handler
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler = RichHandler(show_path=False, log_time_format="%Y-%m-%d %H:%M:%S")
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root.addHandler(handler)
    root.propagate = False


def parse_policy_options(items: Sequence[str]) -> dict[str, Any]:
    """KEY=VALUE strings → keyword arguments (whole numbers, numbers, true/false converted; a
    VALUE in brackets is a JSON list, e.g. `thresholds=[3600,36000]`)."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise ValueError(f"{item!r} is not KEY=VALUE")
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        elif raw.strip().startswith("["):
            value = _json_list(key, raw)
        else:
            for kind in (int, float):
                try:
                    value = kind(raw) if raw.isascii() else raw
                    break
                except ValueError:
                    continue
        out[key] = value
    return out


def _json_list(key: str, raw: str) -> list[Any]:
    import json

    try:
        value = json.loads(raw) if len(raw) <= 4096 else None
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list):
        raise ValueError(f"{key}={raw[:60]!r}: not a JSON list (e.g. {key}=[3600,36000])")
    return value

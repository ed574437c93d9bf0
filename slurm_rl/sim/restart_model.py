"""The restart model file: what a live restart costs, step by step, as
`benchmarks/calibrate_restart.py` measures it on a cluster and writes it
(`slurm-rl simulate --restart-model FILE`).

    [restart]
    grace_s = 60.0     # checkpoint signal -> requeue: GPUs held, no progress
    requeue_s = 1.0    # requeue -> the job may start again: GPUs free
    restore_s = 0.1    # start -> restored from the checkpoint: GPUs held, no progress

    [measured]         # the calibration's figures, for people: not read
    ...

A key left out keeps the engine's default for it (grace 60 s, requeue 0.9 s, restore 30 s).
Other tables or keys are refused, naming the file and the key, as is a value that is not a number
of seconds >= 0.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from slurm_rl.sim.config import EngineConfig, describe_value

KEYS = {"grace_s": "restart_grace_s", "requeue_s": "requeue_s", "restore_s": "restart_delay_s"}
"""A [restart] key and the EngineConfig field it sets."""
TABLES = ("restart", "measured")


@dataclass(frozen=True, kw_only=True)
class RestartModel:
    """A restart's steps in seconds (None: the engine's default)."""

    grace_s: float | None = None
    requeue_s: float | None = None
    restore_s: float | None = None

    def apply(self, engine: EngineConfig) -> EngineConfig:
        """`engine` with the steps this model sets."""
        changes = {field: getattr(self, key) for key, field in KEYS.items()
                   if getattr(self, key) is not None}
        return replace(engine, **changes)


def read_restart_model(path: str | Path) -> RestartModel:
    """The model in the file at `path`; ValueError, one line starting with the path, for a file
    that cannot be read, is not TOML, or holds a key or value the model does not take."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}"
                         ) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not TOML: {exc}") from None
    return model_from_doc(doc, where=str(path))


def model_from_doc(doc: dict[str, Any], *, where: str) -> RestartModel:
    stray = sorted(set(doc) - set(TABLES))
    if stray:
        raise ValueError(f"{where}: unknown key(s) {', '.join(stray)} (valid tables: "
                         f"{', '.join(TABLES)})")
    table = doc.get("restart")
    if not isinstance(table, dict):
        raise ValueError(f"{where}: needs a [restart] table with "
                         f"{', '.join(KEYS)}" + ("" if table is None
                                                 else f", got {describe_value(table)}"))
    if not isinstance(doc.get("measured", {}), dict):
        raise ValueError(f"{where}: measured must be a table, got "
                         f"{describe_value(doc['measured'])}")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ValueError(f"{where}: [restart] unknown key(s) {', '.join(unknown)} (valid: "
                         f"{', '.join(KEYS)})")
    values: dict[str, float] = {}
    for key, value in table.items():
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not 0 <= value < math.inf):
            raise ValueError(f"{where}: [restart] {key}: expected seconds >= 0, got "
                             f"{describe_value(value)}")
        values[key] = float(value)
    return RestartModel(**values)

"""Training settings as frozen dataclasses whose fields carry their own help: `helped` declares
a field, `describe` lists them (`--list-params` of `slurm-rl train` and `slurm-rl inference
train`)."""

from __future__ import annotations

import dataclasses
from typing import Any


def helped(text: str, default: Any) -> Any:
    """A dataclass field with `default` and its help `text`."""
    return dataclasses.field(default=default, metadata={"help": text})


def describe(cls: type) -> str:
    """One `name = default  # help` line per field of dataclass `cls`."""
    return "\n".join(f"{f.name} = {f.default!r}  # {f.metadata['help']}"
                     for f in dataclasses.fields(cls))

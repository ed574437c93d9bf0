"""One line for a checkpoint file that does not load, whoever reads it (the `rl` policy, the
trainer's `--init`, the inference agents).

`torch.load(..., weights_only=True)` refuses a file that is not a plain checkpoint with a
message of many lines advising to load it again with `weights_only=False`: that would run
whatever code the file holds, and no user of a command can act on it anyway. `load_error`
turns what torch.load raised into a short reason instead. This module reads the exception
only; it never imports torch (the core layer does not).
"""

from __future__ import annotations

import re
from pathlib import Path

_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


class CheckpointError(ValueError):
    """A checkpoint file that is not safe to read or is not the kind asked for. `str()` is one
    line, "PATH: REASON"; `reason` alone is there for a caller that names the path itself."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


def one_line(text: str, limit: int = 200) -> str:
    """`text` on one line (runs of white space, newlines included, become one space), cut to
    `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def reason(exc: BaseException) -> str:
    """Why torch.load refused a file, in a few words and without torch's advice."""
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "a folder, not a file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    text = str(exc)
    found = _GLOBAL.search(text)
    if found:  # a pickle of objects, not of tensors and plain data
        return f"it holds a {found.group(1)} object; only tensors and plain data are read"
    if isinstance(exc, EOFError):
        return "empty or cut short"
    if "zip archive" in text or "PytorchStreamReader" in text or "inline_container" in text:
        return "a damaged torch file: cut short or corrupted"
    return "not a file torch.save wrote"


def load_error(path: str | Path, exc: BaseException, kind: str = "slurm-rl") -> CheckpointError:
    """The CheckpointError for `exc`, raised by torch.load reading `path`: the OS's reason for
    a file that cannot be opened, else "not a KIND checkpoint (REASON)"."""
    if isinstance(exc, OSError):
        return CheckpointError(path, reason(exc))
    return CheckpointError(path, f"not a {kind} checkpoint ({reason(exc)})")

"""Reading a trained `rl` checkpoint for deciding, without the trainer: the file (written by
`slurm-rl train`, `slurm_rl/rl/model.py`: `{"config": constructor args, "state_dict": ...,
"meta": ...}`) becomes a `NumpyScorer` and the observation's job slots.

The daemon runs as root and a checkpoint path comes from its config or a SIGHUP reload: the
file gets the database file's checks before anything reads it. It must be a regular file (a
FIFO or a device would block the read forever), not a symbolic link, owned by root or this
user, writable by nobody else, and at most `MAX_BYTES`. It is opened without following links
and without blocking, checked on the open descriptor (no race between check and read), read
whole, and only then given to `torch.load(..., weights_only=True)` (plain tensors, dicts,
lists, numbers and strings only). torch is imported here, lazily, only to unpickle the file;
the network itself runs in numpy (`scorer.py`), and no global torch setting is changed. Every
refusal is a `CheckpointError` of one line (checkpoint_errors.py: never torch's advice to load
the file with `weights_only=False`).
"""

from __future__ import annotations

import io
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from slurm_rl.checkpoint_errors import CheckpointError, load_error
from slurm_rl.policies.rl.features import N_CLUSTER_FEATURES, N_JOB_FEATURES
from slurm_rl.policies.rl.scorer import NumpyScorer

MAX_BYTES = 64 * 2**20
"""The largest checkpoint read: the shipped one is ~60 kB; a 64-slot MLP of any sane width is
far below this."""


__all__ = ["MAX_BYTES", "CheckpointError", "Loaded", "load", "read_bytes"]


@dataclass(frozen=True, kw_only=True)
class Loaded:
    scorer: NumpyScorer
    max_jobs: int
    """The observation's job slots the network was trained with (FeatureConfig.max_jobs)."""
    meta: dict[str, Any]


def read_bytes(path: Path) -> bytes:
    """The file's bytes, after the checks in the module docstring (CheckpointError)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = "is a symbolic link" if exc.errno == 40 else (exc.strerror or str(exc))
        raise CheckpointError(path, why) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(path, "not a regular file")
        if st.st_uid not in (0, os.geteuid()):
            raise CheckpointError(path, f"owned by uid {st.st_uid}, not by root or this "
                                        f"user (uid {os.geteuid()})")
        if stat.S_IMODE(st.st_mode) & 0o022:
            raise CheckpointError(path, f"writable by group or others (mode "
                                        f"{stat.S_IMODE(st.st_mode):o}): chmod go-w")
        if st.st_size > MAX_BYTES:
            raise CheckpointError(path, f"{st.st_size} bytes, more than a checkpoint may "
                                        f"have ({MAX_BYTES})")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise CheckpointError(path, f"more than {MAX_BYTES} bytes")
    return data


def load(path: Path) -> Loaded:
    """The checkpoint at `path` for deciding; CheckpointError (one line) on any file that is
    not a readable slurm-rl `rl` checkpoint."""
    data = read_bytes(path)
    import torch  # (lazily: only to unpickle the file)

    try:
        with warnings.catch_warnings():  # (torch warns about some pickle protocols)
            warnings.simplefilter("ignore")
            blob = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 (torch raises many kinds; all mean the same)
        raise load_error(path, exc) from None
    if not isinstance(blob, dict) or "config" not in blob or "state_dict" not in blob:
        raise CheckpointError(path, "not a slurm-rl checkpoint (no 'config' and 'state_dict')")
    config, state = blob["config"], blob["state_dict"]
    if not isinstance(config, dict) or not isinstance(state, dict):
        raise CheckpointError(path, "not a slurm-rl checkpoint (config or state_dict not a "
                                    "dict)")
    arrays = {k: v.detach().numpy() for k, v in state.items() if isinstance(v, torch.Tensor)}
    job_f = _int(path, config, "job_features", N_JOB_FEATURES)
    cluster_f = _int(path, config, "cluster_features", N_CLUSTER_FEATURES)
    hidden = _int(path, config, "hidden", 64)
    _check_shapes(path, arrays, job_f + cluster_f, hidden)
    meta = blob.get("meta", {})
    return Loaded(scorer=NumpyScorer.from_state(arrays, job_f),
                  max_jobs=_int(path, config, "max_jobs", 64),
                  meta=dict(meta) if isinstance(meta, dict) else {})


def _int(path: Path, config: dict[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1_000_000:
        raise CheckpointError(path, f"config {key}: {value!r} is not a positive whole number")
    return value


def _check_shapes(path: Path, arrays: dict[str, np.ndarray], inputs: int, hidden: int) -> None:
    """The scoring path's weights have the shapes the config says (as load_state_dict would
    insist); the value head is the trainer's and is not read. (Non-finite weights load: the
    policy refuses the non-finite scores they give, at the decision that meets them.)"""
    want = {"embed.0.weight": (hidden, inputs), "embed.0.bias": (hidden,),
            "embed.2.weight": (hidden, hidden), "embed.2.bias": (hidden,),
            "score.weight": (1, hidden), "score.bias": (1,)}
    for key, shape in want.items():
        got = arrays.get(key)
        if got is None:
            raise CheckpointError(path, f"state_dict has no {key!r}")
        if got.shape != shape:
            raise CheckpointError(path, f"state_dict {key!r} has shape {tuple(got.shape)}, "
                                        f"the config says {shape}")

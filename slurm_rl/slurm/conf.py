"""Where Slurm's client commands find their configuration, checked before the first call.

With `SLURM_CONF` naming a file that is not there, squeue and scontrol retry for about a minute
("retrying in 1sec up to 60sec") before they fail; checking the variable first turns that into
one line at once. With `SLURM_CONF` unset the commands fail quickly by themselves (configless
DNS lookup), so nothing is checked then.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def slurm_conf_problem(env: Mapping[str, str] | None = None) -> str | None:
    """One line saying what is wrong with $SLURM_CONF, or None when it is unset or readable."""
    value = (os.environ if env is None else env).get("SLURM_CONF")
    if value is None:
        return None
    if not value.strip():
        return "SLURM_CONF is set but empty (unset it, or name slurm.conf)"
    path = Path(value)
    if not path.exists():
        return f"SLURM_CONF={value}: no such file (for the test cluster: " \
               'eval "$(docker/cluster env)")'
    if not path.is_file():
        return f"SLURM_CONF={value}: not a file"
    if not os.access(path, os.R_OK):
        return f"SLURM_CONF={value}: not readable by this user"
    return None

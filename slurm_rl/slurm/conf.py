"""Where Slurm's client commands find their configuration, checked before the first call.

With `SLURM_CONF` naming a file that is not there, squeue and scontrol retry for about a minute
("retrying in 1sec up to 60sec") before they fail; checking the variable first turns that into
one line at once. With `SLURM_CONF` unset the commands read /etc/slurm/slurm.conf, else slurmd's
configless cache, else ask DNS for the controller; only when neither file is there does one
quick `scontrol ping` show whether DNS answers, so that a host with no configuration at all
gets one line saying so before the daemon creates anything.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

# Where Slurm 22.05's clients look when SLURM_CONF is unset: the compiled-in default (Debian's
# packages), then the copy slurmd keeps on a configless node.
DEFAULT_CONFS = (Path("/etc/slurm/slurm.conf"), Path("/run/slurm/conf/slurm.conf"))
NO_SOURCE = "Could not establish a configuration source"


def configless_fails() -> bool:
    """True when Slurm's clients find no configuration by DNS either (what `scontrol ping`
    says at once, before it would contact any controller)."""
    try:
        proc = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10,
                              env={k: v for k, v in os.environ.items() if k != "SLURM_CONF"})
    except (OSError, subprocess.TimeoutExpired):
        return False  # no scontrol, or DNS answered and a controller is slow: not this check's
    return NO_SOURCE in proc.stderr


def slurm_conf_problem(env: Mapping[str, str] | None = None,
                       defaults: Sequence[Path] = DEFAULT_CONFS,
                       no_source: Callable[[], bool] = configless_fails) -> str | None:
    """One line saying what is wrong with Slurm's configuration source, or None when
    $SLURM_CONF is readable, or unset and Slurm finds a configuration by itself."""
    value = (os.environ if env is None else env).get("SLURM_CONF")
    if value is None:
        if any(path.is_file() for path in defaults) or not no_source():
            return None
        return (f"no Slurm configuration: SLURM_CONF is not set, {defaults[0]} does not exist "
                "and DNS names no controller (set SLURM_CONF to the cluster's slurm.conf; for "
                'the test cluster: eval "$(docker/cluster env)")')
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

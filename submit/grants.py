"""Is `--rl-class critical` granted to this submitter? Said at submission, not only in the
daemon's log.

The daemon schedules an ungranted critical job as standard (daemon/trust.py), and a site that
loads slurm-rl's job_submit.lua refuses it outright. rlsbatch reads the same `[trust]` lists
from the slurm-rl config the daemon reads (with tomllib alone: this is on rlsbatch's start-up
path) and warns when the user, the account and the QOS the job names are all outside them. An
account or QOS grant holds only where slurmctld enforces accounts, which rlsbatch can not see,
so a job naming a granted account or QOS gets no warning.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping

DEFAULT_CONFIG = "/etc/slurm-rl/slurm-rl.toml"


def _trust_table(env: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    """(the config file read, or "" for none; its [trust] table)."""
    import tomllib

    path = env.get("SLURM_RL_CONFIG") or (DEFAULT_CONFIG if os.path.isfile(DEFAULT_CONFIG)
                                           else "")
    if not path:
        return "", {}
    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh).get("trust")
    except (OSError, ValueError):
        return path, {}  # the daemon reports a broken config; rlsbatch only warns
    return path, table if isinstance(table, dict) else {}


def _names(table: Mapping[str, object], key: str) -> frozenset[str]:
    value = table.get(key)
    return frozenset(v for v in value if isinstance(v, str)) if isinstance(value, list) else \
        frozenset()


def critical_warning(*, account: str | None, qos: str | None, env: Mapping[str, str],
                     user: str | None = None) -> str | None:
    """The warning for a critical job this submitter is not granted, or None."""
    if user is None:
        try:
            user = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            user = str(os.getuid())
    path, table = _trust_table(env)
    if (user in _names(table, "critical_users")
            or (account and account in _names(table, "critical_accounts"))
            or (qos and qos in _names(table, "critical_qos"))):
        return None
    where = f"[trust] in {path}" if path else "no slurm-rl config, so no [trust] grants"
    return (f"--rl-class critical is not granted to user {user} ({where}): the slurm-rl daemon "
            "schedules this job as standard, and where the site loads slurm-rl's job_submit.lua "
            "sbatch may refuse it; ask your Slurm administrator for the grant")

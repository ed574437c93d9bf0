"""Is `--rl-class critical` granted to this submitter? Said at submission, not only in the
daemon's log.

The daemon schedules an ungranted critical job as standard (daemon/trust.py), and a site that
loads slurm-rl's job_submit.lua refuses it outright. rlsbatch reads the same `[trust]` lists
from the slurm-rl config the daemon reads (with tomllib alone: this is on rlsbatch's start-up
path):

- a user in `critical_users`, or a job naming (-A) an account in `critical_accounts`: granted
  (slurmctld checks that the user may use that account);
- otherwise, where the site grants the class through a QOS (`critical_qos`), the user's own
  Slurm associations decide (`sacctmgr show user withassoc`): if the association the job runs
  under allows one of those QOS, the job is submitted with `--qos` set to it (unless it names
  one itself), and slurmctld, which enforces QOS (AccountingStorageEnforce=qos), runs it so;
  if not, rlsbatch refuses the job in one line and submits nothing;
- where neither applies, or sacctmgr can not answer (no slurmdbd), a warning, and the job is
  submitted as asked.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Mapping

DEFAULT_CONFIG = "/etc/slurm-rl/slurm-rl.toml"


class NotGranted(Exception):
    """The site grants the class through a QOS the submitter's association does not allow;
    the message is the one line rlsbatch prints."""


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


def _names(table: Mapping[str, object], key: str) -> tuple[str, ...]:
    """The names listed under KEY, in the config's order."""
    value = table.get(key)
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


ASSOC_FORMAT = "format=DefaultAccount,Account,Partition,QOS"
"""What `sacctmgr -nP show user USER withassoc` is asked for (parse_user_assoc reads it)."""


def parse_user_assoc(text: str) -> tuple[str, tuple[tuple[str, str, frozenset[str]], ...]]:
    """`sacctmgr -nP show user U withassoc format=DefaultAccount,Account,Partition,QOS` ->
    (the default account, ((account, partition or "", the QOS it allows), ...))."""
    default = ""
    rows: list[tuple[str, str, frozenset[str]]] = []
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) != 4:
            continue
        default = default or cols[0]
        rows.append((cols[1], cols[2], frozenset(q for q in cols[3].split(",") if q)))
    return default, tuple(rows)


def allowed_qos(text: str, *, account: str | None, partition: str | None) -> frozenset[str]:
    """The QOS the association a job runs under allows: the job's account (else the user's
    default), in the job's partition where a partition's own association exists, else the
    account's."""
    default, rows = parse_user_assoc(text)
    acct = account or default
    mine = [r for r in rows if r[0] == acct]
    exact = [r for r in mine if partition and r[1] == partition]
    general = [r for r in mine if not r[1]]
    chosen = exact or general or ([] if partition else mine)
    return frozenset().union(*(r[2] for r in chosen))


def sacctmgr_user_assoc(user: str) -> str | None:
    """The user's associations from slurmdbd; None when sacctmgr can not answer."""
    from slurm_rl.slurm.runner import SubprocessRunner

    res = SubprocessRunner(timeout_s=30).run(
        ["sacctmgr", "-nP", "show", "user", user, "withassoc", ASSOC_FORMAT])
    return res.stdout if res.ok else None


def _user_name(user: str | None) -> str:
    if user is not None:
        return user
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def critical_options(*, account: str | None, qos: str | None, partition: str | None,
                     env: Mapping[str, str], user: str | None = None,
                     assoc: Callable[[str], str | None] = sacctmgr_user_assoc
                     ) -> tuple[list[str], str | None]:
    """For a critical job: (sbatch options to add, a warning or None). Raises NotGranted when
    the site grants the class through a QOS and the user's association does not allow it."""
    user = _user_name(user)
    path, table = _trust_table(env)
    if user in _names(table, "critical_users") or \
            (account and account in _names(table, "critical_accounts")):
        return [], None
    names = _names(table, "critical_qos")
    text = assoc(user) if names else None
    if text is None:  # no QOS grant, or no slurmdbd to ask: as before, a warning at most
        if qos and qos in names:
            return [], None
        return [], critical_warning(account=account, qos=qos, env=env, user=user)
    allowed = allowed_qos(text, account=account, partition=partition)
    if qos:
        if qos in names and qos in allowed:
            return [], None
        if qos not in names:  # the job asks for another QOS: the user's choice stands
            return [], critical_warning(account=account, qos=qos, env=env, user=user)
    else:
        usable = [q for q in names if q in allowed]
        if usable:
            return [f"--qos={usable[0]}"], None
    raise NotGranted(_refusal(user, account, qos or names[0], text, path))


def _refusal(user: str, account: str | None, qos: str, text: str, path: str) -> str:
    default, rows = parse_user_assoc(text)
    where = f"account {account or default}" if rows else "no association at all"
    return (f"--rl-class critical: not granted to user {user}: [trust] in {path} grants it "
            f"with the QOS {qos}, which {user}'s Slurm association ({where}) does not allow; "
            f"ask your Slurm administrator (sacctmgr modify user {user} set qos+={qos}), or "
            "submit without --rl-class critical")


def critical_warning(*, account: str | None, qos: str | None, env: Mapping[str, str],
                     user: str | None = None) -> str | None:
    """The warning for a critical job this submitter is not granted, or None."""
    user = _user_name(user)
    path, table = _trust_table(env)
    if (user in _names(table, "critical_users")
            or (account and account in _names(table, "critical_accounts"))
            or (qos and qos in _names(table, "critical_qos"))):
        return None
    where = f"[trust] in {path}" if path else "no slurm-rl config, so no [trust] grants"
    return (f"--rl-class critical is not granted to user {user} ({where}): the slurm-rl daemon "
            "schedules this job as standard, and where the site loads slurm-rl's job_submit.lua "
            "sbatch may refuse it; ask your Slurm administrator for the grant")

"""Unix users for the tests that submit as someone other than root, with their Slurm
associations.

The test cluster enforces associations (AccountingStorageEnforce=associations,limits,qos;
docker/config/slurm.conf.in): a user Slurm has no association for can not submit at all. So a
test user is made in two steps, in this order: the Unix user (`useradd`; the docker engine's
containers read the host's /etc/passwd), then its association (`sacctmgr -i add user`).
slurmctld looks the user's uid up when the association reaches it; an association that
existed before the Unix user did is only found after `scontrol reconfigure`, which this does
in that case.
"""

from __future__ import annotations

import functools
import pwd
import subprocess
from collections.abc import Sequence

ACCOUNT = "rl"
"""The account the tests' users are in (docker/config/accounts.sacctmgr)."""


@functools.cache
def accounting() -> bool:
    """Whether the cluster runs slurmdbd (a cluster started before it did has none)."""
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "AccountingStorageType":
            return value.strip() != "accounting_storage/none"
    return False


def associations(user: str) -> dict[str, set[str]]:
    """{account: the QOS the user may use there} for USER's associations."""
    out = subprocess.run(["sacctmgr", "-nP", "show", "assoc", f"user={user}",
                          "format=Account,QOS"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    rows = (line.split("|") for line in out.splitlines() if "|" in line)
    return {acct: {q for q in qos.split(",") if q} for acct, qos in rows}


def _sacctmgr(*args: str) -> None:
    out = subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True, timeout=60)
    # "Nothing new added": a parallel session added it first; what is there is checked after.
    assert out.returncode == 0 or "Nothing new" in out.stdout + out.stderr, \
        f"sacctmgr -i {' '.join(args)}: {out.stdout}{out.stderr}"


def ensure_users(*names: str, accounts: Sequence[str] = (ACCOUNT,), qos: Sequence[str] = (),
                 associate: bool = True) -> None:
    """Local users (no home, no shell) that may submit under ACCOUNTS (the first is their
    default), and there also under the QOS listed (besides normal). associate=False: a user
    with no association at all, whom Slurm refuses."""
    for name in names:
        made = False
        try:
            pwd.getpwnam(name)
        except KeyError:
            out = subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name],
                                 capture_output=True, text=True)
            assert out.returncode in (0, 9), out.stderr  # 9: made meanwhile elsewhere
            made = True
        if not accounting():
            continue
        have = associations(name)
        if not associate:
            if have:
                _sacctmgr("delete", "user", f"name={name}")
            assert associations(name) == {}, f"{name} still has associations"
            continue
        if made and have:
            # slurmctld knew the association before the uid existed: make it look again.
            subprocess.run(["scontrol", "reconfigure"], check=True, timeout=60)
        wanted = {"normal", *qos}
        missing = [a for a in accounts if a not in have]
        if missing:
            args = ["add", "user", name, f"account={','.join(missing)}"]
            if not have:
                args.append(f"defaultaccount={accounts[0]}")
            if qos:
                args.append(f"qos={','.join(sorted(wanted))}")
            _sacctmgr(*args)
            have = associations(name)
        for account in accounts:
            if not wanted <= have.get(account, set()):
                _sacctmgr("modify", "user", "where", f"name={name}", f"account={account}",
                          "set", f"qos+={','.join(sorted(wanted - have.get(account, set())))}")
        have = associations(name)
        assert all(wanted <= have.get(a, set()) for a in accounts), (name, have)

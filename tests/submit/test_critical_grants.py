"""rlsbatch's reading of the submitter's Slurm associations for `--rl-class critical`
(submit/grants.py): pure, on `sacctmgr -nP show user U withassoc
format=DefaultAccount,Account,Partition,QOS` output recorded on the test cluster (22.05)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_rl.submit.grants import NotGranted, allowed_qos, critical_options, parse_user_assoc

QOS_USER = "rl|rl||critical,normal\n"  # slurmrl-qos: qos=normal,critical
TWO_ACCOUNTS = "rl|rl-critical||normal\nrl|rl||normal\n"  # slurmrl-u1
# Not recorded (the test cluster has no partition associations): the same format, one
# association for the partition gpu of the account rl.
BY_PARTITION = "rl|rl||normal\nrl|rl|gpu|critical,normal\n"


def test_the_association_the_job_runs_under_decides() -> None:
    assert parse_user_assoc(TWO_ACCOUNTS) == ("rl", (("rl-critical", "", frozenset({"normal"})),
                                                     ("rl", "", frozenset({"normal"}))))
    assert allowed_qos(QOS_USER, account=None, partition=None) == {"critical", "normal"}
    assert allowed_qos(QOS_USER, account="other", partition=None) == set()
    assert allowed_qos("", account=None, partition=None) == set()
    assert allowed_qos(BY_PARTITION, account="rl", partition="gpu") == {"critical", "normal"}
    assert allowed_qos(BY_PARTITION, account="rl", partition="cpu") == {"normal"}
    assert allowed_qos(BY_PARTITION, account=None, partition=None) == {"normal"}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "rl.toml"
    config.write_text('[trust]\ncritical_users = ["boss"]\ncritical_accounts = ["urgent"]\n'
                      'critical_qos = ["critical"]\n')
    return {"SLURM_RL_CONFIG": str(config)}


def options(env: dict[str, str], text: str | None, *, user: str = "alice",
            account: str | None = None, qos: str | None = None) -> tuple[list[str], str | None]:
    asked: list[str] = []

    def recorded(name: str) -> str | None:  # a named fake of sacctmgr: the recorded output
        asked.append(name)
        return text

    out = critical_options(account=account, qos=qos, partition=None, env=env, user=user,
                           assoc=recorded)
    assert asked in ([], [user])
    return out


def test_a_qos_the_association_allows_is_asked_for(env: dict[str, str]) -> None:
    assert options(env, QOS_USER) == (["--qos=critical"], None)
    assert options(env, QOS_USER, qos="critical") == ([], None)  # already asked for


def test_user_and_account_grants_need_no_qos(env: dict[str, str]) -> None:
    assert options(env, TWO_ACCOUNTS, user="boss") == ([], None)
    assert options(env, TWO_ACCOUNTS, account="urgent") == ([], None)


def test_without_the_qos_the_job_is_refused_in_one_line(env: dict[str, str]) -> None:
    for text, qos, where in ((TWO_ACCOUNTS, None, "account rl"),
                             (TWO_ACCOUNTS, "critical", "account rl"),
                             ("", None, "no association at all")):
        with pytest.raises(NotGranted) as refused:
            options(env, text, qos=qos)
        assert str(refused.value) == (
            f"--rl-class critical: not granted to user alice: [trust] in "
            f"{env['SLURM_RL_CONFIG']} grants it with the QOS critical, which alice's Slurm "
            f"association ({where}) does not allow; ask your Slurm administrator (sacctmgr "
            "modify user alice set qos+=critical), or submit without --rl-class critical")


def test_no_slurmdbd_or_another_qos_only_warns(env: dict[str, str]) -> None:
    plain, warning = options(env, None)
    assert plain == [] and warning is not None and "not granted to user alice" in warning
    assert options(env, None, qos="critical") == ([], None)  # slurmctld checks it
    other, warning = options(env, QOS_USER, qos="normal")
    assert other == [] and warning is not None


def test_without_a_qos_grant_slurmdbd_is_not_asked(tmp_path: Path) -> None:
    config = tmp_path / "rl.toml"
    config.write_text('[trust]\ncritical_users = ["boss"]\n')

    def never(name: str) -> str | None:
        raise AssertionError(f"sacctmgr asked about {name}")

    plain, warning = critical_options(account=None, qos=None, partition=None,
                                      env={"SLURM_RL_CONFIG": str(config)}, user="alice",
                                      assoc=never)
    assert plain == [] and warning is not None

"""rlsbatch's option table per sbatch release (pure logic; no Slurm needed).

Which release is installed is faked here by presetting the table rlsbatch reads once per
process (`sbatch_options._installed`); tests/submit/test_sbatch_option_table.py checks the real
version read and the real tables against the installed sbatch.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_rl.submit import sbatch_options
from slurm_rl.submit.cmdline import scan_command_line
from slurm_rl.submit.sbatch_options import (
    LONG,
    NO_ARG,
    OPTIONAL,
    RELEASES,
    REQUIRED,
    VARIES,
    debian_version,
    table_for,
)


@pytest.fixture
def release(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, int]]]:
    """Set `release[:] = [table_for(...)]` to fake the installed sbatch's release."""
    fake: list[dict[str, int]] = []
    monkeypatch.setattr(sbatch_options, "_installed", fake)
    yield fake


def test_each_release_table() -> None:
    assert table_for("22.05.8") is LONG
    t24, t26 = table_for("24.11.5"), table_for("slurm-wlm 26.05.5")
    assert set(t24) - set(LONG) == {"autocomplete", "container-id", "extra", "oom-kill-step",
                                    "resv-ports", "segment", "tres-bind", "tres-per-task"}
    assert set(LONG) - set(t24) == {"power"} == set(LONG) - set(t26)
    assert set(t26) - set(t24) == {"consolidate-segments", "container-type", "external",
                                   "mem-update", "resources", "spread-segments"}
    assert (LONG["requeue"], t26["requeue"]) == (NO_ARG, OPTIONAL)
    assert (LONG["get-user-env"], t26["get-user-env"]) == (OPTIONAL, NO_ARG)
    assert t24["tres-per-task"] == REQUIRED
    assert VARIES == set().union(*RELEASES.values())


@pytest.mark.parametrize("version", [None, "", "garbage", "23.02.7", "24.05.8", "slurm 21.08.8",
                                     "２４.１１.5", "24.x"])
def test_an_older_or_unreadable_release_gets_2205s_table(version: str | None) -> None:
    assert table_for(version) is LONG


@pytest.mark.parametrize(("version", "like"), [("25.05.1", "24.11.5"), ("25.11.0", "24.11.5"),
                                               ("slurm 27.05.1", "26.05.5")])
def test_a_newer_unknown_release_gets_the_newest_known_table_before_it(version: str,
                                                                      like: str) -> None:
    assert table_for(version) == table_for(like) != LONG


def _split(args: list[str]) -> tuple[list[tuple[str, str | None]], str | None, str | None]:
    scan = scan_command_line(args)
    return [(o.name, o.value) for o in scan.sbatch], scan.script, scan.error


def test_a_new_option_takes_its_value_on_its_release(release: list[dict[str, int]]) -> None:
    line = ["--tres-per-task", "gres/gpu:1", "job.sh"]
    release[:] = [table_for("24.11.5")]
    assert _split(line) == ([("tres-per-task", "gres/gpu:1")], "job.sh", None)
    release[:] = [LONG]  # 22.05's sbatch refuses it; rlsbatch hands the line over untouched
    assert _split(line)[2] == "unrecognized option '--tres-per-task'"


def test_dropped_changed_and_ambiguous_options(release: list[dict[str, int]]) -> None:
    release[:] = [table_for("26.05.5")]
    assert _split(["--power", "x", "job.sh"])[2] == "unrecognized option '--power'"
    assert _split(["--requeue=1", "job.sh"]) == ([("requeue", "1")], "job.sh", None)
    assert _split(["--get-user-env=10L", "job.sh"])[2] == (
        "option '--get-user-env' doesn't allow an argument")
    assert "is ambiguous" in (_split(["--ext=a", "job.sh"])[2] or "")
    assert _split(["--external", "job.sh"]) == ([("external", None)], "job.sh", None)
    release[:] = [LONG]
    assert _split(["--ext=a", "job.sh"]) == ([("extra-node-info", "a")], "job.sh", None)
    assert _split(["--requeue=1", "job.sh"])[2] == "option '--requeue' doesn't allow an argument"
    assert _split(["--power", "x", "job.sh"]) == ([("power", "x")], "job.sh", None)


def test_the_common_line_never_asks_for_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    def no(*_: object) -> dict[str, int]:
        raise AssertionError("the version was read")

    monkeypatch.setattr(sbatch_options, "installed_table", no)
    line = ["-J", "x", "--gres=gpu:2", "--part", "gpu", "--time", "10", "--comment", "c",
            "--nice=5", "--exclusive", "--container", "img", "--no-requeue", "job.sh", "--power"]
    names = [name for name, _ in _split(line)[0]]
    assert names == ["job-name", "gres", "partition", "time", "comment", "nice", "exclusive",
                     "container", "no-requeue"]


def _changelog(path: Path, first: str) -> str:
    with gzip.open(path, "wb") as f:
        f.write(first.encode() + b"\n\n  * stuff\n" + b"x" * 20000)
    return str(path)


@pytest.mark.parametrize(("first", "want"), [
    ("slurm-wlm (22.05.8-4+deb12u3) bookworm-security; urgency=medium", "22.05.8"),
    ("slurm-wlm (26.05.5-1) unstable; urgency=medium", "26.05.5"),
    ("slurm-wlm (1:24.11.5+really-2~bpo1) trixie; urgency=low", "24.11.5"),
    ("munge (0.5.15-2) unstable; urgency=medium", None),
    ("slurm-wlm unstable", None),
])
def test_debian_version(tmp_path: Path, first: str, want: str | None) -> None:
    assert debian_version(_changelog(tmp_path / "changelog.Debian.gz", first)) == want


def test_debian_version_unreadable(tmp_path: Path) -> None:
    assert debian_version(str(tmp_path / "missing.gz")) is None
    (tmp_path / "plain").write_text("slurm-wlm (22.05.8-1) x\n")
    assert debian_version(str(tmp_path / "plain")) is None

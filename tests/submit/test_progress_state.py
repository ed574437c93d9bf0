"""Where the progress throttle keeps its state: only in a directory no other user can write.

Tests run as root, so "another user" is made with os.chown to an unused uid.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurm_rl import progress as progress_module
from slurm_rl.progress import Throttle, state_dir, state_path

OTHER_UID = 54321


@pytest.fixture(autouse=True)
def fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_module, "_warned_state", False)


def private(path: Path) -> Path:
    path.mkdir(exist_ok=True)
    path.chmod(0o700)
    return path


def env_for(tmp: Path, xdg: Path | None = None) -> dict[str, str]:
    env = {"TMPDIR": str(tmp)}
    if xdg is not None:
        env["XDG_RUNTIME_DIR"] = str(xdg)
    return env


def test_a_private_runtime_dir_is_used_first(tmp_path: Path) -> None:
    xdg = private(tmp_path / "run")
    folder = state_dir(env_for(tmp_path, xdg))
    assert folder == xdg / "slurm-rl"
    st = os.lstat(folder)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.getuid()
    assert state_path("123_4", env_for(tmp_path, xdg)) == folder / "progress-123_4"


@pytest.mark.parametrize("how", ["open-to-others", "other-owner", "symlink", "relative", "file"])
def test_an_unsafe_runtime_dir_falls_back_to_a_private_tmp_dir(tmp_path: Path, how: str) -> None:
    xdg = tmp_path / "run"
    if how == "open-to-others":
        xdg.mkdir(mode=0o777)
        xdg.chmod(0o777)
    elif how == "other-owner":
        private(xdg)
        os.chown(xdg, OTHER_UID, OTHER_UID)
    elif how == "symlink":
        xdg.symlink_to(private(tmp_path / "elsewhere"))
    elif how == "file":
        xdg.write_text("")
    env = env_for(tmp_path, Path("run") if how == "relative" else xdg)
    assert state_dir(env) == tmp_path / f"slurm-rl-{os.getuid()}"
    assert not (tmp_path / "elsewhere" / "slurm-rl").exists()


@pytest.mark.parametrize("how", ["other-owner", "symlink", "open-to-others", "file"])
def test_a_precreated_tmp_dir_is_refused_and_never_written_through(
        tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]) -> None:
    target = private(tmp_path / "attacker")
    planted = tmp_path / f"slurm-rl-{os.getuid()}"
    if how == "other-owner":
        private(planted)
        os.chown(planted, OTHER_UID, OTHER_UID)
    elif how == "symlink":
        planted.symlink_to(target)
    elif how == "open-to-others":
        planted.mkdir()
        planted.chmod(0o1777)
    else:
        planted.write_text("not a directory")
    env = env_for(tmp_path)
    assert state_dir(env) is None and state_path("42", env) is None
    warning = capsys.readouterr().err.splitlines()
    assert len(warning) == 1, warning  # once per process
    assert warning[0].startswith("slurm-rl progress: warning: throttle state kept in memory")
    assert str(planted) in warning[0]
    throttle = Throttle(state_path("42", env), 30.0)
    throttle.record(100.0, 5)
    assert not throttle.due(110.0)  # still throttles, in memory
    assert list(target.iterdir()) == []
    if planted.is_dir() and not planted.is_symlink():
        assert list(planted.iterdir()) == []


def test_a_state_file_that_is_a_link_is_neither_read_nor_followed(tmp_path: Path) -> None:
    folder = private(tmp_path / "state")
    victim = tmp_path / "victim"
    victim.write_text("1000.0 5\n")
    link = folder / "progress-42"
    link.symlink_to(victim)
    throttle = Throttle(link, 30.0)
    assert throttle.last() is None  # O_NOFOLLOW: the link's target is not read
    throttle.record(2000.0, 9)
    assert victim.read_text() == "1000.0 5\n"  # not written through
    assert not link.is_symlink() and link.read_text() == "2000.0 9\n"
    assert stat.S_IMODE(os.lstat(link).st_mode) == 0o600
    assert Throttle(link, 30.0).last() == (2000.0, 9)


def test_a_state_file_of_another_user_or_not_a_file_is_ignored(tmp_path: Path) -> None:
    folder = private(tmp_path / "state")
    theirs = folder / "progress-1"
    theirs.write_text("1000.0 5\n")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    assert Throttle(theirs, 30.0).last() is None
    fifo = folder / "progress-2"
    os.mkfifo(fifo)
    assert Throttle(fifo, 30.0).last() is None  # and does not block


@pytest.mark.parametrize("content", [
    "nan 5", "inf 5", "-1 5", "1e300 5", "1000.0 -5", "1000.0 99999999999999999999",
    "1000.0 ５", "\u0661\u0660\u0660\u0660 5", "1000.0", "", "garbage", "1000.0 5 6",
    "\xff\xfe 1",
])
def test_garbage_in_the_state_file_is_ignored(tmp_path: Path, content: str) -> None:
    path = private(tmp_path / "state") / "progress-42"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    throttle = Throttle(path, 30.0)
    assert throttle.last() is None
    assert throttle.due(5000.0)


def test_a_stale_temporary_file_does_not_stop_the_write(tmp_path: Path) -> None:
    path = private(tmp_path / "state") / "progress-42"
    stale = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    stale.symlink_to(tmp_path / "nowhere")
    Throttle(path, 30.0).record(7.0, 1)
    assert path.read_text() == "7.0 1\n" and not stale.exists()
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("job_id", ["../x", "1/2", "", "a" * 5, "1 2", "1\n2", "." * 3])
def test_job_ids_that_are_not_ids_get_no_state_file(tmp_path: Path, job_id: str) -> None:
    assert state_path(job_id, env_for(tmp_path)) is None
    assert not (tmp_path / f"slurm-rl-{os.getuid()}").exists()

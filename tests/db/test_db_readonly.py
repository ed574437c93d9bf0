"""The read-only session of `slurm-rl status` and `replay`, opened by a user who may read the
database but not write its folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from slurm_rl.db.engine import make_engine
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.readonly import ReadOnlyError, read_only_session

NOBODY = 65534


@pytest.fixture
def root_folder() -> Iterator[Path]:
    """A folder as the daemon keeps one: root's, 0755 (others may enter and read, not write),
    under /tmp so that another user can reach it."""
    if os.geteuid() != 0:
        pytest.skip("needs root (to read as another user)")
    folder = Path(tempfile.mkdtemp(prefix="slurm-rl-ro-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def _jobs_as_nobody(path: Path) -> str:
    """What `read_only_session` gives user nobody (a forked child: no new interpreter, which
    another user may not be able to read): the jobs count, or the error's line."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        out = "?"
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with read_only_session(path) as s:
                out = f"jobs={s.execute(text('SELECT count(*) FROM jobs')).scalar_one()}"
        except ReadOnlyError as exc:
            out = f"error: {exc}"
        except BaseException as exc:  # noqa: BLE001 (reported to the parent, which fails)
            out = f"crash: {type(exc).__name__}: {exc}"
        finally:
            os.write(write, out.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        got = f.read().decode()
    os.waitpid(pid, 0)
    return got


def _database(folder: Path) -> Path:
    path = folder / "slurm-rl.db"
    engine = make_engine(path)
    upgrade(engine)
    with engine.begin() as con:
        assert con.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
    engine.dispose()
    return path


def test_read_while_the_daemon_holds_it_open(root_folder: Path) -> None:
    path = _database(root_folder)
    engine = make_engine(path)
    with engine.connect() as con:  # the daemon, running: -wal and -shm exist
        con.execute(text("SELECT 1"))
        assert Path(f"{path}-wal").exists()
        for p in root_folder.iterdir():
            p.chmod(0o644)
        assert _jobs_as_nobody(path) == "jobs=0"
    engine.dispose()


def test_read_after_the_daemon_stopped(root_folder: Path) -> None:
    """Its last connection closed, SQLite removed -wal and -shm; the reader can not make them
    in root's folder (before: "attempt to write a readonly database")."""
    path = _database(root_folder)
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()
    path.chmod(0o644)
    assert _jobs_as_nobody(path) == "jobs=0"
    assert sorted(p.name for p in root_folder.iterdir()) == ["slurm-rl.db"]

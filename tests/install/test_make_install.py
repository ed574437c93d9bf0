"""`make install` on the real test cluster: a virtualenv from the system's Python in a temporary
PREFIX, the two commands linked into a temporary BINDIR, then `rlsbatch` and `slurm-rl status`
run by an unprivileged user whose PATH is BINDIR:/usr/bin:/bin and who can see neither this
tree (its .venv included) nor root's home; then `make uninstall`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_jobs import ensure_users, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
USER = "slurmrl-u1"
SYSTEM_PYTHON = Path("/usr/bin/python3")
HIDDEN = (REPO, Path.home())
"""Mounted over with an empty tmpfs for the user's commands: the source tree and root's home
(root's interpreter, pip's cache)."""


def make(*args: str) -> subprocess.CompletedProcess[str]:
    # A clean make: nothing from a `make test` this may run under (MAKEFLAGS carries its
    # command-line variables).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO), *args], env=env,
                          capture_output=True, text=True, timeout=600)


def _can_hide() -> bool:
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def installed() -> Iterator[tuple[Path, Path]]:
    """(PREFIX, BINDIR) of a `make install` into a folder any user may enter."""
    root = Path(tempfile.mkdtemp(prefix="slurm-rl-install-", dir="/tmp"))
    root.chmod(0o755)
    prefix, bindir = root / "opt", root / "bin"
    try:
        started = time.monotonic()
        out = make("install", f"PREFIX={prefix}", f"BINDIR={bindir}")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        print(f"make install: {time.monotonic() - started:.0f} s")
        yield prefix, bindir
    finally:
        make("uninstall", f"PREFIX={prefix}")
        shutil.rmtree(root, ignore_errors=True)


class User:
    """Runs commands as USER with nothing but `env` (no HOME of its own, the cwd a folder it
    may read), and, where the host allows a mount namespace, with HIDDEN out of sight."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env = env
        self.cwd = cwd
        self.hide = _can_hide()
        if not self.hide:
            warnings.warn("unshare --mount is refused here: the user's commands still see "
                          f"{', '.join(map(str, HIDDEN))}", stacklevel=2)

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        command = ["runuser", "-u", USER, "--", "env", "-i",
                   *(f"{k}={v}" for k, v in self.env.items()), *argv]
        if self.hide:
            mounts = " && ".join(f"mount -t tmpfs -o mode=0700 none '{p}'" for p in HIDDEN)
            command = ["unshare", "--mount", "--", "sh", "-c", f'{mounts} && exec "$@"', "sh",
                       *command]
        return subprocess.run(command, cwd=self.cwd, capture_output=True, text=True, timeout=120)


def listed(user: User, job_id: str) -> dict[str, object] | None:
    out = user.run("slurm-rl", "status", "--json")
    assert out.returncode == 0, out.stderr
    return next((r for r in json.loads(out.stdout)["rows"] if r["job_id"] == job_id), None)


def test_an_unprivileged_user_submits_and_sees_the_queue(installed: tuple[Path, Path]) -> None:
    prefix, bindir = installed
    # The venv's interpreter is the system's; the package is a copy, not an editable link here.
    assert (prefix / "bin" / "python").resolve() == SYSTEM_PYTHON.resolve()
    assert sorted(p.name for p in bindir.iterdir()) == ["rlsbatch", "slurm-rl"]
    assert all(os.readlink(bindir / name) == str(prefix / "bin" / name)
               for name in ("rlsbatch", "slurm-rl"))
    ensure_users(USER)
    tag = f"in{uuid.uuid4().hex[:8]}"
    db = prefix.parent / "rl.db"
    user = User({"PATH": f"{bindir}:/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8",
                 "SLURM_CONF": os.environ["SLURM_CONF"], "SLURM_RL_DB": str(db)},
                cwd=prefix.parent)
    where = user.run("python3", "-c", "import slurm_rl; print(slurm_rl.__file__)")
    assert where.returncode != 0  # /usr/bin/python3 has no slurm_rl: the commands bring theirs
    version = user.run("slurm-rl", "--version")
    assert version.returncode == 0 and "0.1.0" in version.stdout, version.stderr
    # The site's daemon, as root, from the installed venv, narrowed to this test's job.
    daemon = subprocess.Popen([str(prefix / "bin" / "slurm-rl"), "daemon", "--db", str(db),
                               "--only-name-prefix", tag, "--policy", "deadline",
                               "--interval", "1"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    job_id = None
    try:
        wait_for(lambda: db.exists(), 60, "the daemon's first cycle")
        sub = user.run("rlsbatch", "-J", tag, "--chdir", "/tmp", "-o", "/dev/null", "-e",
                       "/dev/null", "-t", "2", "--begin", "now+3600", "--gres=gpu:1",
                       "--rl-deadline", "+2h", "--wrap", "sleep 1")
        assert sub.returncode == 0, sub.stdout + sub.stderr
        assert "Traceback" not in sub.stderr
        match = re.fullmatch(r"Submitted batch job (\d+)", sub.stdout.strip())
        assert match, sub.stdout
        job_id = match.group(1)
        row = wait_for(lambda: listed(user, job_id), 60, f"status to list job {job_id}")
        assert row["name"] == tag and row["user"] == USER and row["state"] == "PENDING", row
        assert row["deadline"] is not None and row["managed"], row
        table = user.run("slurm-rl", "status")
        assert table.returncode == 0, table.stderr
        [line] = [ln for ln in table.stdout.splitlines() if tag in ln]
        assert job_id in line.split(), table.stdout
    finally:
        if job_id is not None:
            subprocess.run(["scancel", job_id], capture_output=True)
        daemon.terminate()
        _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, err[-3000:]

    # Again: the same install, in place; then uninstall removes the links and PREFIX only.
    again = make("install", f"PREFIX={prefix}", f"BINDIR={bindir}")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert user.run("rlsbatch", "--rl-help").returncode == 0
    gone = make("uninstall", f"PREFIX={prefix}")
    assert gone.returncode == 0, gone.stderr
    assert not prefix.exists() and bindir.is_dir() and not any(bindir.iterdir())
    assert db.exists()  # not install's

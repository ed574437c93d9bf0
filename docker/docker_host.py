"""What the dockerized cluster runs on the host (docker/cluster_docker.py): a private munged with
the cluster's key, so that the host's Slurm clients authenticate; readiness through sinfo and
sacctmgr; the accounts loaded into slurmdbd."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docker_image import ImageError

NODES = ("node1", "node2", "node3", "node4")


def munged_pid(s: Any) -> int | None:
    try:
        pid = int((s.dir / "munge" / "munged.pid").read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if comm == "munged" else None


def start_host_munged(s: Any) -> None:
    """The host's own munged for this cluster (same key), so host clients authenticate."""
    mdir = s.dir / "munge"
    for f in (s.socket, Path(f"{s.socket}.lock"), mdir / "munged.pid"):
        f.unlink(missing_ok=True)
    subprocess.run(["munged", f"--socket={s.socket}", f"--key-file={mdir / 'munge.key'}",
                    f"--pid-file={mdir / 'munged.pid'}", f"--log-file={mdir / 'munged.log'}",
                    f"--seed-file={mdir / 'munged.seed'}", "--num-threads=4"],
                   check=True, pass_fds=())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cred = subprocess.run(["munge", "-n", "-S", str(s.socket)], capture_output=True)
        if cred.returncode == 0 and subprocess.run(
                ["unmunge", "-S", str(s.socket)], input=cred.stdout,
                capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    raise ImageError(f"the host's munged does not answer on {s.socket}")


def stop_host_munged(s: Any) -> None:
    pid = munged_pid(s)
    if pid is None:
        return
    os.kill(pid, 15)
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    s.socket.unlink(missing_ok=True)


def host_client_fits(version: str) -> bool:
    """Whether the host's Slurm client speaks VERSION's protocol (same major release).

    Slurm accepts clients of at most two releases back; the host (Debian 12) has 22.05, so on
    trixie's 24.11 and forky's 26.05 clusters client commands run in a container instead."""
    # sinfo reads a slurm.conf even for -V (with none it tries DNS SRV records and dies): give
    # it a minimal one, so that the answer does not depend on the caller's SLURM_CONF.
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "slurm.conf"
        conf.write_text("ClusterName=version\nSlurmctldHost=localhost\n")
        try:
            out = subprocess.run(["sinfo", "-V"], capture_output=True, text=True, timeout=10,
                                 env=dict(os.environ, SLURM_CONF=str(conf)))
        except (OSError, subprocess.TimeoutExpired):
            return False
    parts = out.stdout.split()
    return len(parts) == 2 and parts[1].startswith(version + ".")


def cluster_command(s: Any, client: Any, command: str, container: str,
                    args: list[str]) -> tuple[int, str]:
    """`COMMAND ARGS` against the cluster: on the host when its client fits the cluster's
    version, else inside the `<name>-CONTAINER` container. Returns (exit status,
    stdout+stderr)."""
    if s.host_client:
        try:
            out = subprocess.run([command, *args], capture_output=True, text=True, timeout=15,
                                 env=dict(os.environ, SLURM_CONF=str(s.conf)))
        except subprocess.TimeoutExpired:
            return 124, f"{command} timed out"
        return out.returncode, out.stdout + out.stderr
    import docker.errors

    try:
        box = client.containers.get(f"{s.name}-{container}")
        res = box.exec_run(["timeout", "15", command, *args],
                           environment={"SLURM_CONF": str(s.conf)})
    except docker.errors.APIError as e:
        return 1, str(e)
    return int(res.exit_code or 0), res.output.decode(errors="replace")


def sinfo(s: Any, client: Any, args: list[str]) -> tuple[int, str]:
    """`sinfo ARGS` against the cluster (inside the slurmctld container if need be)."""
    return cluster_command(s, client, "sinfo", "slurmctld", args)


def nodes_ready(s: Any, client: Any) -> bool:
    """All four nodes registered and responding, none down (busy states count as up)."""
    rc, out = sinfo(s, client, ["-h", "-N", "-o", "%N %t"])
    if rc != 0:
        return False
    states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
    if sorted(states) != list(NODES):
        return False
    bad = {"down", "fail", "failg", "unk", "inval", "futr", "boot", "npc", "pow_dn", "pow_up"}
    for st in states.values():
        if st[-1] in "*~#%!":
            return False
        if st.rstrip("$@^-") in bad:
            return False
    return True


def sacctmgr(s: Any, client: Any, args: list[str]) -> tuple[int, str]:
    """`sacctmgr ARGS` against the cluster's slurmdbd (inside the dbd container if need be)."""
    return cluster_command(s, client, "sacctmgr", "dbd", args)


def wait_dbd(s: Any, client: Any, deadline: float, dead: Callable[[], list[str]]) -> None:
    """Until slurmdbd answers (it creates its tables in a new database first)."""
    while True:
        rc, out = sacctmgr(s, client, ["-n", "-P", "show", "cluster", "format=Cluster"])
        if rc == 0:
            return
        gone = dead()
        if gone or time.monotonic() > deadline:
            why = f"containers exited: {', '.join(gone)}" if gone else \
                f"slurmdbd does not answer: {out.strip()[-200:]}"
            raise ImageError(f"up failed: {why}")
        time.sleep(0.2)


def load_accounts(s: Any, client: Any, text: str) -> None:
    """Each command of TEXT (docker/config/accounts.sacctmgr) through `sacctmgr -i`."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        rc, out = sacctmgr(s, client, ["-i", *shlex.split(line)])
        if rc != 0:
            raise ImageError(f"sacctmgr -i {line}: exit {rc}: {out.strip()[-300:]}")

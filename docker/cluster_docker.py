"""docker/cluster --engine docker: the slurm-rl test cluster in containers, via the docker SDK.

    docker/cluster --engine docker up       build/reuse the image; slurmctld + node1..node4
    docker/cluster --engine docker down     remove the containers and the network
                                            (--purge: also delete the cluster directory)
    docker/cluster --engine docker status   containers and sinfo; exit 0 only if all are up
    docker/cluster --engine docker env      the `export SLURM_CONF=...` lines for clients
    docker/cluster --engine docker image    build/reuse the image and print its tag
    docker/cluster --engine docker slurm-rl ARGS   `slurm-rl ARGS` in a container of the
                                            daemon image (slurm-rl from the working tree)
    docker/cluster --engine docker client CMD...   CMD in a client container (login node) of
                                            the cluster's Slurm version, in the current dir

One slurmdbd container (`NAME-dbd`: MariaDB and slurmdbd, the accounting), one slurmctld
container and four slurmd containers (node1..node4: 8 CPUs, 16000 MB, 4 fake GPUs each) on
their own bridge network with fixed addresses; every container runs its own munged with one
shared key. `up` starts the dbd and node containers, loads docker/config/accounts.sacctmgr
once slurmdbd answers (slurmctld refuses to start on a new cluster without it), then starts
slurmctld.
slurm.conf is docker/config/slurm.conf.in with the host, node and port lines replaced, and is
the same file for the containers and for the host's client commands: the host reaches
slurmctld (and slurmdbd) at its address on the bridge and authenticates through a private
munged of its own (same key, socket under the cluster directory).

Environment:
  SLURM_RL_CLUSTER_DIR     state directory (absolute)      [/var/tmp/slurm-rl-docker]
  SLURM_RL_DEBIAN          Debian release of the image     [bookworm] (trixie, forky)
  SLURM_RL_DOCKER_NAME     prefix of container/network names [slurm-rl]
  SLURM_RL_DOCKER_SUBNET   the network's /24               [172.30.77.0/24]
  SLURM_RL_DOCKER_SHARES   host paths mounted at the same path in the nodes, ':'-separated
                           (the "shared filesystem" jobs see) [/tmp:/home:REPO:PYTHON_PREFIX]
  SLURM_RL_UP_TIMEOUT      seconds `up` waits for idle nodes [120]
"""

from __future__ import annotations

import fcntl
import importlib
import ipaddress
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker_image
from docker_host import (
    NODES,
    host_client_fits,
    load_accounts,
    munged_pid,
    nodes_ready,
    sinfo,
    start_host_munged,
    stop_host_munged,
    wait_dbd,
)
from docker_image import ImageError, log

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GPUS_PER_NODE = 4
CTLD_PORT = 6817  # inside the containers' own network namespaces: no clash with the host
SLURMD_PORT = 6818
DBD_PORT = 6819
DB_PORT = 3306  # MariaDB, on the dbd container's loopback only
LABEL = "slurm-rl.cluster"


class Usage(Exception):
    """Bad command line: exit 2."""


class Settings:
    def __init__(self) -> None:
        d = os.environ.get("SLURM_RL_CLUSTER_DIR", "/var/tmp/slurm-rl-docker")
        self.dir = Path(os.path.abspath(d))
        if (self.dir / "spool").exists() or (self.dir / "run" / "slurmctld.pid").exists():
            raise Usage(f"{self.dir} holds a native cluster (docker/cluster up); give the docker "
                        "engine its own SLURM_RL_CLUSTER_DIR (default /var/tmp/slurm-rl-docker)")
        self.release = os.environ.get("SLURM_RL_DEBIAN", "bookworm")
        if self.release not in docker_image.RELEASES:
            raise Usage(f"SLURM_RL_DEBIAN={self.release}: not one of "
                        f"{', '.join(docker_image.RELEASES)}")
        self.name = os.environ.get("SLURM_RL_DOCKER_NAME", "slurm-rl")
        subnet = os.environ.get("SLURM_RL_DOCKER_SUBNET", "172.30.77.0/24")
        try:
            self.subnet = ipaddress.IPv4Network(subnet)
        except ValueError as e:
            raise Usage(f"SLURM_RL_DOCKER_SUBNET={subnet}: {e}") from e
        if self.subnet.num_addresses < 32:
            raise Usage(f"SLURM_RL_DOCKER_SUBNET={subnet}: needs at least a /27")
        timeout = os.environ.get("SLURM_RL_UP_TIMEOUT", "120")
        try:
            self.timeout = float(timeout)
        except ValueError:
            raise Usage(f"SLURM_RL_UP_TIMEOUT={timeout}: not a number of seconds") from None
        self.cache = Path(os.environ.get("SLURM_RL_DOCKER_CACHE", "/var/cache/slurm-rl-docker"))
        shares = os.environ.get("SLURM_RL_DOCKER_SHARES")
        if shares is None:
            cands = ["/tmp", "/home", str(REPO), os.path.realpath(sys.base_prefix)]
        else:
            cands = [s for s in shares.split(":") if s]
        self.shares = _top_dirs([c for c in cands if os.path.isdir(c)])
        self.host_client = host_client_fits(docker_image.RELEASES[self.release])
        self.conf = self.dir / "etc" / "slurm.conf"
        self.socket = self.dir / "munge" / "munge.socket"

    def ip(self, k: int) -> str:
        return str(self.subnet.network_address + k)

    def containers(self) -> dict[str, str]:
        """container name -> role ("slurmdbd", "slurmctld" or the node name), in start order."""
        out = {f"{self.name}-dbd": "slurmdbd", f"{self.name}-slurmctld": "slurmctld"}
        out.update({f"{self.name}-{n}": n for n in NODES})
        return out

    def role_ip(self, role: str) -> str:
        """Fixed addresses: .2 slurmctld, .3 slurmdbd, .11-.14 the nodes."""
        if role == "slurmctld":
            return self.ip(2)
        if role == "slurmdbd":
            return self.ip(3)
        return self.ip(10 + int(role.removeprefix("node")))


def _top_dirs(paths: list[str]) -> list[str]:
    """Drop paths inside another path of the list (one mount covers them)."""
    real = sorted({os.path.realpath(p) for p in paths})
    return [p for p in real if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in real)]


# ---------------------------------------------------------------------------------- rendering
def render(s: Settings) -> dict[str, str]:
    """slurm.conf, gres.conf, plugstack.conf, job_submit.lua, slurmdbd.conf and the accounts to
    load (accounts.sacctmgr) for the dockerized cluster."""
    subst = {"SLURM_RL_DIR": str(s.dir), "SLURM_RL_CTLD_PORT": str(CTLD_PORT),
             "SLURM_RL_SLURMD_PORT_FIRST": str(SLURMD_PORT),
             "SLURM_RL_SLURMD_PORT_LAST": str(SLURMD_PORT),
             "SLURM_RL_DBD_HOST": s.role_ip("slurmdbd"), "SLURM_RL_DBD_PORT": str(DBD_PORT),
             "SLURM_RL_DB_PORT": str(DB_PORT)}

    def fill(name: str) -> str:
        text = (HERE / "config" / name).read_text()
        for key, value in subst.items():
            text = text.replace("${" + key + "}", value)
        return text

    lines = ["# Rendered by docker/cluster_docker.py from docker/config/slurm.conf.in: the",
             "# dockerized cluster (one container per daemon; addresses on its own network)."]
    for line in fill("slurm.conf.in").splitlines():
        if line.startswith("SlurmctldHost="):
            line = f"SlurmctldHost=slurmctld({s.ip(2)})"
        elif line.startswith("NodeName="):
            hw = line[line.index(" CPUs="):]
            line = "\n".join(f"NodeName={n} NodeHostname={n} NodeAddr={s.role_ip(n)}"
                             f" Port={SLURMD_PORT}{hw}" for n in NODES)
        lines.append(line)
    return {"slurm.conf": "\n".join(lines) + "\n", "gres.conf": fill("gres.conf.in"),
            "plugstack.conf": fill("plugstack.conf.in"),
            "job_submit.lua": (HERE / "config" / "job_submit.lua").read_text(),
            "slurmdbd.conf": fill("slurmdbd.conf.in"),
            "accounts.sacctmgr": (HERE / "config" / "accounts.sacctmgr").read_text()}


# --------------------------------------------------------------------------------- containers
def _client() -> Any:
    try:
        # By name: for mypy, `docker` would be this repository's docker/ folder.
        docker: Any = importlib.import_module("docker")
    except ImportError as e:
        raise ImageError("the docker SDK is not installed (pip install docker)") from e
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:  # noqa: BLE001 - the SDK raises several kinds here
        raise ImageError(f"no Docker engine reachable ({e}); start dockerd, "
                         "or use the native launcher (docker/cluster up)") from e
    return client


def _ours(client: Any, s: Settings) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"{LABEL}={s.dir}"}))


def remove_all(client: Any, s: Settings) -> None:
    import docker.errors

    for c in _ours(client, s):
        try:
            c.remove(force=True)
        except docker.errors.APIError as e:  # already gone, or its removal in progress
            if e.status_code not in (404, 409):
                raise
    for name in s.containers():
        try:
            c = client.containers.get(name)
        except docker.errors.NotFound:
            continue
        if c.labels.get(LABEL) != str(s.dir):
            raise ImageError(f"container {name} belongs to another cluster "
                             f"({c.labels.get(LABEL)}); set SLURM_RL_DOCKER_NAME")
    for net in client.networks.list(names=[f"{s.name}-net"]):
        if net.name == f"{s.name}-net":
            net.remove()


def create_network(client: Any, s: Settings) -> None:
    import docker.types

    # Fixed addresses .2 (slurmctld), .3 (slurmdbd) and .11-.14 (nodes); other containers on
    # the network (the daemon's) get theirs from the upper half.
    upper = list(s.subnet.subnets(prefixlen_diff=1))[1]
    pool = docker.types.IPAMPool(subnet=str(s.subnet), gateway=s.ip(1), iprange=str(upper))
    client.networks.create(f"{s.name}-net", driver="bridge", labels={LABEL: str(s.dir)},
                           ipam=docker.types.IPAMConfig(pool_configs=[pool]))


def start_containers(client: Any, s: Settings, image: str, config: str,
                     roles: tuple[str, ...]) -> None:
    """The containers of ROLES (see Settings.containers), on the cluster's network."""
    net_name = f"{s.name}-net"
    mounts = {str(s.dir / "etc"): {"bind": str(s.dir / "etc"), "mode": "ro"},
              str(s.dir / "log"): {"bind": str(s.dir / "log"), "mode": "rw"},
              str(s.dir / "munge" / "munge.key"): {"bind": "/etc/slurm-rl/munge.key",
                                                   "mode": "ro"},
              "/etc": {"bind": "/run/host-etc", "mode": "ro"}}
    for name, role in s.containers().items():
        if role not in roles:
            continue
        ip = s.role_ip(role)
        vols = dict(mounts)
        node = role.startswith("node")
        if node:
            vols.update({p: {"bind": p, "mode": "rw"} for p in s.shares})
        cmd = ["slurmd", role] if node else [role]
        caps = ["SYS_ADMIN"] if s.release in docker_image.NEEDS_SYS_ADMIN and node else None
        client.containers.run(
            image, cmd, name=name, hostname="dbd" if role == "slurmdbd" else role,
            detach=True, init=True, cap_add=caps,
            environment={"SLURM_RL_DIR": str(s.dir), "SLURM_CONF": str(s.conf),
                         "SLURM_RL_GPUS_PER_NODE": str(GPUS_PER_NODE)},
            volumes=vols, labels={LABEL: str(s.dir), "slurm-rl.config": config,
                                  "slurm-rl.role": role},
            network=net_name,
            networking_config={net_name: client.api.create_endpoint_config(ipv4_address=ip)})


def containers_running(client: Any, s: Settings, config: str | None) -> bool:
    have = {c.name: c for c in _ours(client, s)}
    for name in s.containers():
        c = have.get(name)
        if c is None or c.status != "running":
            return False
        if config is not None and c.labels.get("slurm-rl.config") != config:
            return False
    return True


def show_logs(client: Any, s: Settings) -> None:
    for c in _ours(client, s):
        print(f"\n===== docker logs {c.name} ({c.status}) =====", file=sys.stderr)
        print(c.logs(tail=15).decode(errors="replace"), file=sys.stderr)
    for f in sorted((s.dir / "log").glob("*.log")):
        print(f"\n===== tail -n 20 {f} =====", file=sys.stderr)
        print("\n".join(f.read_text(errors="replace").splitlines()[-20:]), file=sys.stderr)


# ----------------------------------------------------------------------------------- commands
def lock(s: Settings) -> Any:
    s.dir.mkdir(parents=True, exist_ok=True)
    f = open(s.dir / "cluster.lock", "w")  # noqa: SIM115 - held until exit
    deadline = time.monotonic() + 300
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise ImageError(f"could not lock {s.dir / 'cluster.lock'} within 300 s") from None
            time.sleep(0.5)


def prepare_dir(s: Settings, files: dict[str, str]) -> None:
    for sub in ("etc", "munge", "log"):
        (s.dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(s.dir / sub, 0o755)
    os.chmod(s.dir, 0o755)
    for name, text in files.items():
        (s.dir / "etc" / name).write_text(text)
        # slurmdbd refuses a slurmdbd.conf that others may read (the database password)
        os.chmod(s.dir / "etc" / name, 0o600 if name == "slurmdbd.conf" else 0o644)
    for f in (s.dir / "log").glob("*.log"):
        f.replace(f"{f}.1")
    key = s.dir / "munge" / "munge.key"
    if not key.is_file() or key.stat().st_size == 0:
        key.write_bytes(os.urandom(1024))
    os.chown(key, 0, 0)
    os.chmod(key, 0o400)


def config_hash(s: Settings, image_id: str, files: dict[str, str]) -> str:
    return docker_image._hash(image_id, str(s.subnet), *s.shares,
                              *(f"{k}\0{v}" for k, v in sorted(files.items())))


def cmd_up(s: Settings) -> int:
    if os.geteuid() != 0:
        raise ImageError("'up' must run as root (munged's key, containers)")
    for tool in ("munged", "munge", "sinfo", "sbatch"):
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} is missing on the host (apt-get install slurm-client munge)")
    client = _client()
    _lock = lock(s)
    t0 = time.monotonic()
    image = docker_image.build_node(client, s.release, s.cache)
    files = render(s)
    config = config_hash(s, client.images.get(image).id, files)
    if (containers_running(client, s, config) and munged_pid(s) is not None
            and s.conf.is_file() and s.conf.read_text() == files["slurm.conf"]
            and nodes_ready(s, client)):
        log(f"already running and healthy ({s.dir})")
        return 0
    log(f"starting a fresh cluster in {s.dir} ({image})")
    remove_all(client, s)
    stop_host_munged(s)
    prepare_dir(s, files)
    try:
        start_host_munged(s)
        create_network(client, s)
        # The nodes start with slurmdbd (they need nothing of it; slurmctld pings them once it
        # runs): about 0.8 s less than starting them after slurmctld.
        start_containers(client, s, image, config, ("slurmdbd", *NODES))
        deadline = time.monotonic() + s.timeout
        wait_dbd(s, client, deadline, lambda: [c.name for c in _ours(client, s)
                                               if c.status != "running"])
        t_dbd = time.monotonic() - t0
        load_accounts(s, client, files["accounts.sacctmgr"])
        start_containers(client, s, image, config, ("slurmctld",))
        while not nodes_ready(s, client):
            dead = [c.name for c in _ours(client, s) if c.status != "running"]
            if dead or time.monotonic() > deadline:
                why = f"containers exited: {', '.join(dead)}" if dead else \
                    f"nodes not idle within {s.timeout:.0f}s"
                raise ImageError(f"up failed: {why}")
            time.sleep(0.3)
    except Exception:
        show_logs(client, s)
        remove_all(client, s)
        stop_host_munged(s)
        raise
    log(f"up in {time.monotonic() - t0:.1f}s (slurmdbd answered after {t_dbd:.1f}s): "
        f"{len(NODES)} nodes x gpu:{GPUS_PER_NODE}, slurmctld at {s.ip(2)}:{CTLD_PORT}, "
        f"slurmdbd at {s.role_ip('slurmdbd')}:{DBD_PORT}, Slurm "
        f"{docker_image.RELEASES[s.release]} (Debian {s.release})")
    if s.host_client:
        log(f"use: export SLURM_CONF={s.conf}")
    else:
        log("the host's Slurm client is too old for this cluster: run client commands with "
            "`docker/cluster --engine docker client CMD...`")
    return 0


def cmd_down(s: Settings, purge: bool) -> int:
    if not s.dir.exists():
        log(f"nothing to stop ({s.dir} does not exist)")
        return 0
    client = _client()
    _lock = lock(s)
    remove_all(client, s)
    stop_host_munged(s)
    if purge:
        shutil.rmtree(s.dir)
        log(f"stopped; removed {s.dir}")
    else:
        log(f"stopped (logs kept in {s.dir / 'log'}; 'down --purge' removes {s.dir})")
    return 0


def cmd_status(s: Settings) -> int:
    print(f"cluster dir: {s.dir}\nSLURM_CONF={s.conf}\nengine: docker")
    client = _client()
    have = {c.name: c for c in _ours(client, s)}
    for name in s.containers():
        c = have.get(name)
        print(f"{name:<24} {c.status if c else '-'}")
    pid = munged_pid(s)
    print(f"{'munged (host)':<24} {pid if pid else '-'}")
    ok = containers_running(client, s, None) and pid is not None
    if have.get(f"{s.name}-slurmctld") is not None and s.conf.is_file():
        print(sinfo(s, client, ["-N", "-o", "%N %P %t %c %m %G"])[1].rstrip())
    ok = ok and nodes_ready(s, client)
    print("status: up" if ok else "status: down or degraded")
    return 0 if ok else 1


def cmd_env(s: Settings) -> int:
    print(f"export SLURM_CONF={s.conf}")
    print(f"export SLURM_RL_CLUSTER_DIR={s.dir}")
    print("export SLURM_RL_ENGINE=docker")
    return 0


def main(argv: list[str]) -> int:
    try:
        s = Settings()
        cmd, rest = (argv[0], argv[1:]) if argv else ("", [])
        if cmd == "up" and not rest:
            return cmd_up(s)
        if cmd == "down" and rest in ([], ["--purge"]):
            return cmd_down(s, purge=bool(rest))
        if cmd == "status" and not rest:
            return cmd_status(s)
        if cmd == "env" and not rest:
            return cmd_env(s)
        if cmd == "logs" and not rest:
            show_logs(_client(), s)
            return 0
        if cmd == "slurm-rl" and rest:
            import daemon_image

            return daemon_image.run_slurm_rl(_client(), s, rest)
        if cmd == "client" and rest:
            import daemon_image

            return daemon_image.run_client(_client(), s, rest)
        if cmd == "image" and not rest:
            print(docker_image.build_node(_client(), s.release, s.cache))
            return 0
        raise Usage(f"unknown command {' '.join(argv)!r}; use up, down [--purge], status, env, "
                    "logs, image, slurm-rl ARGS, client CMD" if argv else
                    "a command is needed: up, down, status, env, logs, image, slurm-rl, client")
    except Usage as e:
        print(f"cluster: error: {e}", file=sys.stderr)
        return 2
    except (ImageError, OSError, subprocess.CalledProcessError) as e:
        if os.environ.get("SLURM_RL_DEBUG"):
            raise
        print(f"cluster: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

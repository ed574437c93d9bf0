"""Images of the dockerized test cluster, built with no image registry (docker/cluster_docker.py).

Two layers, each tagged with a hash of its inputs so that a rebuild happens only when an input
changes:

  slurm-rl-base:RELEASE-HASH   `debootstrap --variant=minbase RELEASE` from the host's Debian
                               mirror with Slurm and munge included, then `docker import`
                               (the slow step: about a minute, once per release/package list)
  slurm-rl-node:RELEASE-HASH   base + docker/node-entrypoint.sh (`docker build`, seconds)

`slurm-rl-daemon:...` (slurm-rl installed from the working tree) is built by daemon_image.py.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

DEBOOTSTRAP_TIMEOUT_S = 1200
"""The longest a base image's debootstrap may take."""
HERE = Path(__file__).resolve().parent
RECIPE_VERSION = "1"  # bump to force a rebuild of the base image after a recipe change

# What the base image holds: Slurm's daemons and clients with the job_submit/lua plugin,
# slurmdbd and MariaDB (accounting, in the dbd container), munge, Python for slurm-rl, and the
# few tools the entrypoints use. The base image's tag hashes this list: a change rebuilds it.
PACKAGES = (
    "slurmctld", "slurmd", "slurm-client", "slurm-wlm-basic-plugins", "slurmdbd",
    "mariadb-server", "munge", "procps", "util-linux", "gettext-base", "python3",
    "python3-venv", "ca-certificates",
)

# Debian release -> Slurm version its packages carry (measured; docker/README.md).
RELEASES = {"bookworm": "22.05", "trixie": "24.11", "forky": "26.05"}
# Slurm 24.11+ slurmd builds a job's environment (sbatch --export=ALL,VAR=...) in a child
# cloned into a new mount namespace: without CAP_SYS_ADMIN slurmd dies ("fatal: clone:
# Operation not permitted"). Measured on trixie; 22.05 does not need it.
NEEDS_SYS_ADMIN = {"trixie", "forky"}
# Releases whose Release files on the mirror are past Valid-Until.
_NO_VALID_UNTIL = {"forky", "sid"}

# The accounting database is initialised here, once per image, not at every start (4 s).
ACCOUNTING_DATADIR = "/var/lib/slurm-rl-db"
NODE_DOCKERFILE = """\
FROM {base}
COPY node-entrypoint.sh /usr/local/sbin/slurm-rl-node
COPY accounting-db.sh /usr/local/sbin/slurm-rl-accounting-db
RUN chmod 755 /usr/local/sbin/slurm-rl-node /usr/local/sbin/slurm-rl-accounting-db \\
    && mkdir -p /etc/slurm-rl \\
    && /usr/local/sbin/slurm-rl-accounting-db init {datadir}
ENTRYPOINT ["/usr/local/sbin/slurm-rl-node"]
"""


class ImageError(Exception):
    """A build step failed; the message says which and why."""


def log(msg: str) -> None:
    print(f"cluster: {msg}", file=sys.stderr, flush=True)


def _hash(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:12]


def host_mirror() -> str:
    """The Debian mirror the host's apt uses (SLURM_RL_DEBIAN_MIRROR overrides)."""
    env = os.environ.get("SLURM_RL_DEBIAN_MIRROR")
    if env:
        return env.rstrip("/")
    files = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for f in files:
        for line in f.read_text(errors="replace").splitlines():
            m = re.match(r"\s*URIs:\s*(\S+)", line)
            if m and "security" not in m.group(1):
                return m.group(1).rstrip("/")
    lists = [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*.list")]
    for f in lists:
        if not f.is_file():
            continue
        for line in f.read_text(errors="replace").splitlines():
            m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)", line)
            if m and "security" not in m.group(1):
                return m.group(1).rstrip("/")
    return "http://deb.debian.org/debian"


def has_image(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def base_tag(release: str, mirror: str) -> str:
    return f"slurm-rl-base:{release}-{_hash(RECIPE_VERSION, release, mirror, *PACKAGES)}"


def build_base(client: Any, release: str, cache_dir: Path) -> str:
    """The debootstrapped base image for RELEASE; built only when its tag is missing."""
    mirror = host_mirror()
    tag = base_tag(release, mirror)
    if has_image(client, tag):
        return tag
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is missing (apt-get install debootstrap)")
    t0 = time.monotonic()
    log(f"building {tag}: debootstrap --variant=minbase {release} from {mirror} (about a minute)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    debs = cache_dir / f"debs-{release}"
    debs.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=f"rootfs-{release}-") as tmp:
        root = Path(tmp) / "root"
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
                f"--cache-dir={debs}", release, str(root), mirror]
        if not Path(f"/usr/share/debootstrap/scripts/{release}").exists():
            argv.append("sid")  # an older debootstrap without this release's script
        try:
            # bounded: a stalled mirror must not hang `make test` (a first build takes 1.5-3
            # minutes here)
            proc = subprocess.run(argv, capture_output=True, text=True,
                                  timeout=DEBOOTSTRAP_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise ImageError(f"debootstrap {release} did not finish within "
                             f"{DEBOOTSTRAP_TIMEOUT_S} s (mirror {mirror})") from e
        finally:
            _unmount_below(root)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
            raise ImageError(f"debootstrap {release} failed:\n{tail}")
        _finish_rootfs(root, release, mirror)
        tar_path = Path(tmp) / "rootfs.tar"
        with tarfile.open(tar_path, "w") as tar:
            tar.add(root, arcname=".")
        repo, _, version = tag.partition(":")
        client.api.import_image(src=str(tar_path), repository=repo, tag=version,
                                changes=['CMD ["/bin/bash"]'])
    log(f"built {tag} in {time.monotonic() - t0:.0f}s")
    return tag


def _unmount_below(root: Path) -> None:
    """debootstrap mounts /proc (and /sys) in the new tree; a failed run may leave them."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _finish_rootfs(root: Path, release: str, mirror: str) -> None:
    """Small fixes inside the debootstrapped tree before it becomes an image."""
    # apt inside the image uses the same mirror; forky/sid need Valid-Until off.
    (root / "etc/apt/sources.list").write_text(f"deb {mirror} {release} main\n")
    if release in _NO_VALID_UNTIL:
        (root / "etc/apt/apt.conf.d/99no-valid-until").write_text(
            'Acquire::Check-Valid-Until "false";\n')
    # No package caches in the image.
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        d = root / sub
        if d.is_dir():
            for f in d.glob("*"):
                if f.is_file():
                    f.unlink()


def build_files(client: Any, tag: str, files: dict[str, bytes]) -> None:
    """docker build from an in-memory context (a tar of FILES, Dockerfile included)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    build_context(client, tag, buf)


def build_context(client: Any, tag: str, context: io.BytesIO) -> None:
    """docker build of a tar CONTEXT (Dockerfile at its top), with no network."""
    import docker.errors

    try:
        client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True,
                            forcerm=True, network_mode="none")
    except docker.errors.BuildError as e:
        lines = [str(c.get("stream", c.get("error", ""))).rstrip() for c in e.build_log]
        raise ImageError(f"docker build {tag} failed: {e.msg}\n" + "\n".join(lines[-15:])) from e


def build_node(client: Any, release: str, cache_dir: Path) -> str:
    """The cluster's image (slurmctld and slurmd containers); built when its tag is missing."""
    base = build_base(client, release, cache_dir)
    entry = (HERE / "node-entrypoint.sh").read_bytes()
    db = (HERE / "accounting-db.sh").read_bytes()
    dockerfile = NODE_DOCKERFILE.format(base=base, datadir=ACCOUNTING_DATADIR).encode()
    tag = f"slurm-rl-node:{release}-{_hash(base, dockerfile, entry, db)}"
    if not has_image(client, tag):
        t0 = time.monotonic()
        build_files(client, tag, {"Dockerfile": dockerfile, "node-entrypoint.sh": entry,
                                  "accounting-db.sh": db})
        log(f"built {tag} in {time.monotonic() - t0:.1f}s")
    return tag

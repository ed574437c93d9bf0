"""The daemon's image: the cluster's node image plus slurm-rl installed from the working tree.

    slurm-rl-daemon:RELEASE-HASH   slurm-rl-node + /opt/slurm-rl (a venv with slurm-rl)

No registry and no index are needed: slurm-rl is a wheel built on the host from the working tree
(`pip wheel --no-deps`), and the pure-Python/manylinux libraries the daemon imports are copied
from the host's virtualenv (same CPython minor version as Debian's python3 in the image, 3.11 on
bookworm). numpy is copied too (`deadline` builds its profile of running jobs in arrays); torch
and the other heavy dependencies are left out: the heuristic policies do not import them (the
`rl` policy would need torch to read its checkpoint). The tag is a hash of the node
image, the wheel's contents and the copied libraries' versions.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import io
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker_image

REPO = Path(__file__).resolve().parents[1]

# Distributions the daemon imports (measured: `slurm-rl daemon --once --policy deadline`, plus
# the optional metrics and `status` output libraries).
DAEMON_LIBS = ("click", "SQLAlchemy", "alembic", "Mako", "MarkupSafe", "typing_extensions",
               "Pygments", "rich", "markdown-it-py", "mdurl", "prometheus_client", "greenlet",
               "numpy")

DOCKERFILE = """\
FROM {node}
RUN python3 -m venv /opt/slurm-rl
COPY site-packages/ /opt/slurm-rl/lib/python{pyver}/site-packages/
COPY wheels/ /tmp/wheels/
RUN /opt/slurm-rl/bin/pip install -q --no-index --no-deps /tmp/wheels/*.whl \\
 && rm -rf /tmp/wheels && ln -s /opt/slurm-rl/bin/slurm-rl /usr/local/bin/slurm-rl
"""


def _wheel(out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--no-build-isolation", "-w", str(out), str(REPO)],
                          capture_output=True, text=True)
    wheels = sorted(out.glob("slurm_rl-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise docker_image.ImageError(f"pip wheel of {REPO} failed:\n{proc.stderr[-2000:]}")
    return wheels[0]


def _lib_files() -> tuple[dict[str, bytes], list[str]]:
    """site-packages files of DAEMON_LIBS (relative path -> bytes) and their name==version."""
    files: dict[str, bytes] = {}
    versions = []
    for name in DAEMON_LIBS:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # optional (greenlet on some platforms)
        versions.append(f"{name}=={dist.version}")
        for f in dist.files or ():
            rel = str(f)
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
                continue
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                files[rel] = path.read_bytes()
    return files, versions


def build_daemon(client: Any, release: str, cache: Path) -> str:
    """Build (or reuse) the daemon image; returns its tag."""
    if release != "bookworm":
        raise docker_image.ImageError("the daemon image copies the host's Python 3.11 libraries; "
                                      "it is built on bookworm only")
    node = docker_image.build_node(client, release, cache)
    pyver = f"{sys.version_info.major}.{sys.version_info.minor}"
    with tempfile.TemporaryDirectory(prefix="slurm-rl-wheel-") as tmp:
        wheel = _wheel(Path(tmp))
        wheel_bytes = wheel.read_bytes()
        wheel_name = wheel.name
    libs, versions = _lib_files()
    dockerfile = DOCKERFILE.format(node=node, pyver=pyver).encode()
    # A wheel's zip holds timestamps: hash the entries' contents, not the archive.
    h = hashlib.sha256()
    import zipfile

    with zipfile.ZipFile(io.BytesIO(wheel_bytes)) as z:
        for info in sorted(z.infolist(), key=lambda i: i.filename):
            if info.filename.endswith("RECORD"):
                continue
            h.update(info.filename.encode() + b"\0" + z.read(info) + b"\0")
    key = docker_image._hash(node, dockerfile, h.hexdigest(), *versions)
    tag = f"slurm-rl-daemon:{release}-{key}"
    if docker_image.has_image(client, tag):
        return tag
    t0 = time.monotonic()
    context = {"Dockerfile": dockerfile, f"wheels/{wheel_name}": wheel_bytes}
    context.update({f"site-packages/{rel}": data for rel, data in libs.items()})
    docker_image.build_files(client, tag, context)
    docker_image.log(f"built {tag} in {time.monotonic() - t0:.1f}s")
    # Every change of the working tree makes a new daemon image: drop the older ones.
    import docker.errors

    for image in client.images.list(name="slurm-rl-daemon"):
        for old in image.tags:
            if old != tag and old.startswith(f"slurm-rl-daemon:{release}-"):
                try:
                    client.images.remove(old)
                except docker.errors.APIError:
                    pass  # in use by a running container
    return tag


def run_slurm_rl(client: Any, s: Any, args: list[str]) -> int:
    """`slurm-rl ARGS` in a container of the daemon image on the cluster's network.

    The container runs its own munged with the cluster's key and reads the cluster's slurm.conf,
    like a daemon on a login or admin node. The host directory S.dir/daemon is its
    /var/lib/slurm-rl (the database). Prints the container's output; returns its exit status.
    """
    image = build_daemon(client, s.release, s.cache)
    state = s.dir / "daemon"
    state.mkdir(mode=0o755, exist_ok=True)
    return run_attached(client, s, image, "daemon", ["slurm-rl", *args],
                        {str(state): {"bind": "/var/lib/slurm-rl", "mode": "rw"}}, {}, None)


def run_client(client: Any, s: Any, argv: list[str]) -> int:
    """ARGV in a client container of the cluster's own Slurm version (a login node).

    For a cluster whose Slurm the host's client commands can not talk to (trixie's 24.11 and
    forky's 26.05 accept clients of at most two releases back; the host has 22.05). The shared
    paths (S.shares: the repository, /tmp, the host Python's prefix) are mounted at the same
    paths and the command runs in the current directory, so `.venv/bin/pytest` works inside;
    the Docker socket is mounted too, so the test fixture's `docker/cluster status` sees the
    cluster. Returns the command's exit status.
    """
    image = docker_image.build_node(client, s.release, s.cache)
    vols = {p: {"bind": p, "mode": "rw"} for p in s.shares}
    vols["/var/run/docker.sock"] = {"bind": "/var/run/docker.sock", "mode": "rw"}
    env = {k: v for k, v in os.environ.items()
           if k.startswith("SLURM_RL_") or k in ("PYTHONPATH", "TERM")}
    env.update({"SLURM_RL_ENGINE": "docker", "SLURM_RL_CLUSTER_DIR": str(s.dir)})
    return run_attached(client, s, image, "client", argv, vols, env, os.getcwd())


def run_attached(client: Any, s: Any, image: str, role: str, argv: list[str],
                 volumes: dict[str, dict[str, str]], env: dict[str, str],
                 workdir: str | None) -> int:
    """Run ARGV (after the entrypoint's munged) in a fresh container; stream its output."""
    import docker.errors

    name = f"{s.name}-{role}-{uuid.uuid4().hex[:6]}"  # several may run at once
    vols = {str(s.dir / "etc"): {"bind": str(s.dir / "etc"), "mode": "ro"},
            str(s.dir / "munge" / "munge.key"): {"bind": "/etc/slurm-rl/munge.key", "mode": "ro"},
            "/etc": {"bind": "/run/host-etc", "mode": "ro"}, **volumes}
    container = client.containers.run(
        image, ["run", *argv], name=name, hostname=f"slurm-rl-{role}", detach=True, init=True,
        network=f"{s.name}-net", working_dir=workdir,
        environment={**env, "SLURM_RL_DIR": str(s.dir), "SLURM_CONF": str(s.conf)},
        volumes=vols, labels={"slurm-rl.cluster": str(s.dir), "slurm-rl.role": role})
    try:
        for chunk in container.logs(stream=True, follow=True):
            sys.stderr.write(chunk.decode(errors="replace"))
        status = container.wait()
    except KeyboardInterrupt:
        container.stop(timeout=10)
        status = container.wait()
    finally:
        sys.stderr.flush()
    try:
        container.remove(force=True)
    except docker.errors.APIError:
        pass  # removed already (`docker/cluster down`)
    return int(status.get("StatusCode", 1))

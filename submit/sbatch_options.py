"""sbatch 22.05's option table, and getopt_long's rules for reading it.

rlsbatch does not reimplement sbatch's parser: it only needs to know, for each option, whether it
takes a value, so that it can tell where the options end and the script begins, and find the few
options it reads (--comment, the GPU and node requests, --partition, --wrap). The table was taken
from the sbatch 22.05.8 binary itself: every name from `sbatch --help`, `man sbatch` and the
strings of libslurmfull was tried as `--name` and `--name=x`, and getopt's answers ("requires an
argument", "doesn't allow an argument", neither) sorted them; hidden aliases found that way
(--cluster, --context, --ntasks-per-tres, --tasks-per-node) are included. A Slurm test
(tests/submit/test_sbatch_option_table.py) probes the installed sbatch again, so a Slurm upgrade
that adds or changes an option fails loudly instead of silently mis-splitting a command line.

Newer sbatch releases add, drop and change options (RELEASES below, probed the same way from the
24.11.5 and 26.05.5 binaries of Debian trixie and forky). The table in use is chosen by the
installed sbatch's version, read lazily: only an option whose name is (or abbreviates) one that
differs between releases needs it, so the common command line costs nothing more. The version
comes from Debian's changelog of the slurm-client package when the sbatch on PATH is
/usr/bin/sbatch (no subprocess), else from `sbatch -V`. An unknown or unreadable version gets
22.05's table (docs/design.md, "Across Slurm versions").
"""

from __future__ import annotations

import os
from collections.abc import Mapping

NO_ARG = 0
REQUIRED = 1
OPTIONAL = 2  # the value must be attached: --nice=5 or -k5 ("--nice 5" makes 5 the script)

LONG: dict[str, int] = {
    name: REQUIRED for name in (
        "account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "chdir", "cluster",
        "cluster-constraint", "clusters", "comment", "constraint", "container", "context",
        "core-spec", "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task",
        "deadline", "delay-boot", "dependency", "distribution", "error", "exclude", "export",
        "export-file", "extra-node-info", "gid", "gpu-bind", "gpu-freq", "gpus",
        "gpus-per-node", "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "hint",
        "input", "job-name", "kill-on-invalid-dep", "licenses", "mail-type", "mail-user",
        "mcs-label", "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "network",
        "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu",
        "ntasks-per-node", "ntasks-per-socket", "ntasks-per-tres", "open-mode", "output",
        "partition", "power", "prefer", "priority", "profile", "qos", "reservation", "signal",
        "sockets-per-node", "switches", "tasks-per-node", "thread-spec", "threads-per-core",
        "time", "time-min", "tmp", "uid", "wait-all-nodes", "wckey", "wrap",
    )
}
LONG.update({
    name: NO_ARG for name in (
        "contiguous", "help", "hold", "ignore-pbs", "no-requeue", "overcommit", "oversubscribe",
        "parsable", "quiet", "reboot", "requeue", "spread-job", "test-only", "usage",
        "use-min-nodes", "verbose", "version", "wait",
    )
})
LONG.update({
    name: OPTIONAL for name in ("exclusive", "get-user-env", "nice", "no-kill", "propagate")
})

_TRIXIE: dict[str, int | None] = {
    "autocomplete": REQUIRED, "container-id": REQUIRED, "extra": REQUIRED,
    "oom-kill-step": OPTIONAL, "power": None, "resv-ports": OPTIONAL, "segment": REQUIRED,
    "tres-bind": REQUIRED, "tres-per-task": REQUIRED,
}
RELEASES: dict[str, dict[str, int | None]] = {
    "22.05": {},
    "24.11": _TRIXIE,
    "26.05": {
        **_TRIXIE, "consolidate-segments": NO_ARG, "container-type": REQUIRED, "external": NO_ARG,
        "get-user-env": NO_ARG, "mem-update": REQUIRED, "requeue": OPTIONAL,
        "resources": REQUIRED, "spread-segments": NO_ARG,
    },
}
"""Each known sbatch release's changes to LONG (22.05's): name -> its kind, None if dropped."""

VARIES = frozenset(name for changes in RELEASES.values() for name in changes)
"""The long options whose presence or kind depends on the release."""

SHORT: dict[str, str] = {
    "a": "array", "A": "account", "b": "begin", "B": "extra-node-info", "c": "cpus-per-task",
    "C": "constraint", "d": "dependency", "D": "chdir", "e": "error", "F": "nodefile",
    "G": "gpus", "h": "help", "H": "hold", "i": "input", "J": "job-name", "k": "no-kill",
    "L": "licenses", "m": "distribution", "M": "clusters", "n": "ntasks", "N": "nodes",
    "o": "output", "O": "overcommit", "p": "partition", "q": "qos", "Q": "quiet",
    "s": "oversubscribe", "S": "core-spec", "t": "time", "v": "verbose", "V": "version",
    "w": "nodelist", "W": "wait", "x": "exclude",
}
"""Short option letter -> the long option it stands for (same argument rule)."""

GPU_OPTIONS = ("gres", "gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket")
"""Options that ask sbatch for GPUs (a --gres without gpu in it asks for none)."""

GPU_ENV = {
    "gres": "SBATCH_GRES", "gpus": "SBATCH_GPUS", "gpus-per-node": "SBATCH_GPUS_PER_NODE",
    "gpus-per-task": "SBATCH_GPUS_PER_TASK",
}
"""sbatch reads these environment variables like the options (command line > env > script)."""


class OptionError(ValueError):
    """An option getopt_long would refuse; the message reads like getopt's."""


def _release(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of "24.11.5", "slurm-wlm 24.11.5"...; None if it does not read so."""
    words = version.split() if version else []
    parts = words[-1].split(".")[:2] if words else []
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def table_for(version: str | None) -> dict[str, int]:
    """The long-option table of sbatch `version` ("24.11.5", "slurm-wlm 24.11.5"...): that of
    the newest known release not newer than it (25.05 gets 24.11's: options stay once added,
    as far as the known releases show), 22.05's for anything older or unreadable."""
    have = _release(version)
    known = sorted((r, name) for name in RELEASES if (r := _release(name)) is not None)
    fit = [name for r, name in known if have is not None and r <= have]
    changes = RELEASES[fit[-1]] if fit else {}
    if not changes:
        return LONG
    table = dict(LONG)
    for name, kind in changes.items():
        if kind is None:
            table.pop(name, None)
        else:
            table[name] = kind
    return table


_installed: list[dict[str, int]] = []


def installed_table() -> dict[str, int]:
    """The table of the sbatch rlsbatch will run (read once per process)."""
    if not _installed:
        _installed.append(table_for(sbatch_version()))
    return _installed[0]


def sbatch_version(env: Mapping[str, str] | None = None) -> str | None:
    """The version of the `sbatch` on PATH ("22.05.8"), or None if it cannot be told. `env`
    (default: this process's) gives PATH, and SLURM_CONF for `sbatch -V`."""
    path = _on_path("sbatch", (os.environ if env is None else env).get("PATH", os.defpath))
    if path is None:
        return None
    if os.path.realpath(path) == "/usr/bin/sbatch":
        version = debian_version("/usr/share/doc/slurm-client/changelog.Debian.gz")
        if version:
            return version
    import subprocess  # only for an sbatch that is not Debian's

    try:
        proc = subprocess.run([path, "-V"], capture_output=True, text=True, env=env, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    words = proc.stdout.split()
    return words[-1] if proc.returncode == 0 and words and words[-1][:1].isdigit() else None


def debian_version(changelog: str) -> str | None:
    """The upstream version in the first entry of a Debian changelog.gz: "slurm-wlm
    (22.05.8-4+deb12u3) bookworm-security; ..." -> "22.05.8". None if unreadable."""
    import zlib  # a C module, loaded only when a version is needed

    try:
        with open(changelog, "rb") as f:
            head = zlib.decompressobj(47).decompress(f.read(4096), 512)
    except (OSError, zlib.error):
        return None
    line = head.split(b"\n", 1)[0].decode("ascii", "replace")
    start, end = line.find("("), line.find(")")
    if not line.startswith("slurm") or not 0 < start < end:
        return None
    upstream = line[start + 1:end].split(":")[-1].split("-")[0].split("+")[0]
    return upstream if upstream[:1].isdigit() else None


def _on_path(command: str, path: str) -> str | None:
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", command)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def long_kind(canon: str) -> int:
    """Whether option `--canon` (a name resolve_long returned) takes a value."""
    return installed_table()[canon] if canon in VARIES else LONG[canon]


def resolve_long(name: str) -> str:
    """The option `--name` stands for: an exact name, or an unambiguous prefix (getopt_long),
    in the installed sbatch's table. That table is only looked up for a name that is (or
    abbreviates) an option some release adds, drops or changes."""
    table = LONG
    if name and (name in VARIES or (name not in LONG
                                    and any(opt.startswith(name) for opt in VARIES))):
        table = installed_table()
    return resolve_in(name, table)


def resolve_in(name: str, table: Mapping[str, int]) -> str:
    """resolve_long in a given table."""
    if name in table:
        return name
    matches = [opt for opt in table if opt.startswith(name)] if name else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise OptionError(f"unrecognized option '--{name}'")
    choices = " ".join(f"'--{m}'" for m in sorted(matches))
    raise OptionError(f"option '--{name}' is ambiguous; possibilities: {choices}")

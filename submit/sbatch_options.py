"""sbatch 22.05's option table, and getopt_long's rules for reading it.

rlsbatch does not reimplement sbatch's parser: it only needs to know, for each option, whether it
takes a value, so that it can tell where the options end and the script begins, and find the few
options it reads (--comment, the GPU and node requests, --partition, --wrap). The table was taken
from the sbatch 22.05.8 binary itself: every name from `sbatch --help`, `man sbatch` and the
strings of libslurmfull was tried as `--name` and `--name=x`, and getopt's answers ("requires an
argument", "doesn't allow an argument", neither) sorted them; hidden aliases found that way
(--cluster, --context, --ntasks-per-tres, --tasks-per-node) are included. A Slurm test
(tests/submit/test_sbatch_identity.py) probes the installed sbatch again, so a Slurm upgrade
that adds or changes an option fails loudly instead of silently mis-splitting a command line.
"""

from __future__ import annotations

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


def resolve_long(name: str) -> str:
    """The option `--name` stands for: an exact name, or an unambiguous prefix (getopt_long)."""
    if name in LONG:
        return name
    matches = [opt for opt in LONG if opt.startswith(name)] if name else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise OptionError(f"unrecognized option '--{name}'")
    choices = " ".join(f"'--{m}'" for m in sorted(matches))
    raise OptionError(f"option '--{name}' is ambiguous; possibilities: {choices}")

"""The GPU range rule: how `--rl-gpus MIN-MAX` meets sbatch's own GPU options.

- No sbatch GPU request (no --gres=gpu..., --gpus/-G, --gpus-per-node, --gpus-per-task,
  --gpus-per-socket, on the command line, in SBATCH_* variables or on #SBATCH lines): the job
  starts with MIN GPUs, asked for per node as `--gres=gpu:K` (the form the daemon resizes with
  `scontrol update TresPerNode=gres/gpu:K`). MIN fits on one node: `--gres=gpu:MIN`. Larger:
  `--nodes=N --gres=gpu:K` with N = ceil(MIN / GPUs per node) and K = ceil(MIN / N); if the
  user gave --nodes, N is its minimum and only --gres is added. K*N must not exceed MAX.
- An sbatch GPU request (--gres=gpu[:type]:K, --gpus-per-node=K times the minimum node count,
  or --gpus=K) sets the starting count, and it must lie within MIN-MAX; nothing is added.
  --gpus-per-task and --gpus-per-socket (whose totals depend on placement) can not be combined
  with --rl-gpus.
- MAX may not exceed the GPUs of the partition (sinfo; the requested partition, else the
  default one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from slurm_rl.submit.cmdline import Opt
from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.sbatch_options import GPU_ENV, GPU_OPTIONS
from slurm_rl.submit.tags import brief, read_digits

PartitionGpus = dict[str, tuple[bool, int, int]]
"""partition -> (is default, total GPUs, most GPUs on one node)."""

SINFO_ARGS = ("sinfo", "-h", "-a", "-o", "%P|%D|%G")


def effective(name: str, cmdline: list[Opt], env: Mapping[str, str], script: list[Opt],
              env_name: str | None = None) -> Opt | None:
    """The value sbatch will use for option `name`: the command line beats the environment,
    which beats the script; within each, the last occurrence wins."""
    for opt in reversed(cmdline):
        if opt.name == name:
            return opt
    if env_name and env.get(env_name):
        return Opt(name, env[env_name], f"${env_name}")
    for opt in reversed(script):
        if opt.name == name:
            return opt
    return None


def gres_gpu_count(spec: str) -> int | None:
    """GPUs in a GRES list ("gpu:2", "gpu", "gpu:a100:4", "gpu:2,nic:1", "gpu:4(S:0-1)");
    None when it names no GPU."""
    total: int | None = None
    depth = 0
    item = ""
    items: list[str] = []
    for ch in spec + ",":
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(item)
            item = ""
        elif depth == 0:
            item += ch
    for entry in items:
        entry = entry.strip()
        if entry.startswith("gres/"):
            entry = entry[5:]
        parts = entry.split(":")
        if parts[0] != "gpu":
            continue
        # "gpu" and "gpu:a100" ask for one GPU; "gpu:2" and "gpu:a100:2" for two.
        # Only ASCII digits are a count; anything else is a type name, as sbatch reads it.
        count = read_digits(parts[-1]) if len(parts) > 1 else None
        count = 1 if count is None else count
        total = (total or 0) + count
    return total


def typed_count(spec: str) -> int | None:
    """The count in a --gpus/--gpus-per-node value ("4" or "a100:4")."""
    return read_digits(spec.rsplit(":", 1)[-1].strip())


def min_nodes(spec: str) -> int | None:
    digits = ""
    for ch in spec.strip():
        if not "0" <= ch <= "9":
            break
        digits += ch
    return read_digits(digits)


def parse_sinfo(text: str) -> PartitionGpus:
    """`sinfo -h -a -o '%P|%D|%G'` -> per partition (default?, total GPUs, max per node)."""
    out: PartitionGpus = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, nodes, gres = line.split("|", 2)
        default = name.endswith("*")
        name = name.rstrip("*")
        per_node = gres_gpu_count(gres) or 0
        was_default, total, most = out.get(name, (False, 0, 0))
        out[name] = (default or was_default, total + int(nodes) * per_node, max(most, per_node))
    return out


def partition_gpus(flag: str, cmdline: list[Opt], env: Mapping[str, str], script: list[Opt],
                   query: Callable[[], PartitionGpus]) -> tuple[str, int, int]:
    """(partition name(s), total GPUs, most GPUs on one node) of the partition the job asks
    for (-p, $SBATCH_PARTITION, #SBATCH -p; the largest of several), else the default one;
    UsageError naming `flag` when there is none such."""
    parts = query()
    part_opt = effective("partition", cmdline, env, script, "SBATCH_PARTITION")
    if part_opt and part_opt.value:
        names = [p for p in part_opt.value.split(",") if p]
        missing = [p for p in names if p not in parts]
        if missing:
            raise UsageError(f"{flag}: sinfo shows no partition {missing[0]!r}")
    else:
        names = [p for p, (default, _, _) in parts.items() if default]
        if not names:
            raise UsageError(f"{flag}: there is no default partition; give --partition")
    total = max(parts[p][1] for p in names)
    per_node = max(parts[p][2] for p in names)
    return ",".join(names), total, per_node


def plan_gpus(
    gpus_min: int,
    gpus_max: int,
    cmdline: list[Opt],
    env: Mapping[str, str],
    script: list[Opt],
    query: Callable[[], PartitionGpus],
) -> list[str]:
    """The sbatch options to add for `--rl-gpus gpus_min-gpus_max` (maybe none); raises
    UsageError when the range does not fit the request or the partition."""
    requests = [o for o in (effective(n, cmdline, env, script, GPU_ENV.get(n))
                            for n in GPU_OPTIONS) if o is not None]
    if any(o.name == "gres" for o in requests):
        gres = next(o for o in requests if o.name == "gres")
        if gres_gpu_count(gres.value or "") is None:
            requests.remove(gres)  # --gres=nic:1 and the like ask for no GPU
    nodes_opt = effective("nodes", cmdline, env, script)
    nodes = min_nodes(nodes_opt.value or "") if nodes_opt else None
    where, total, per_node = partition_gpus("--rl-gpus", cmdline, env, script, query)
    if gpus_max > total:
        raise UsageError(
            f"--rl-gpus: {gpus_min}-{gpus_max}: partition {where} has only {total} GPUs"
        )
    if requests:
        return _check_sbatch_request(requests, gpus_min, gpus_max, nodes)
    if nodes:
        k = -(-gpus_min // nodes)
        if k > per_node:
            raise UsageError(
                f"--rl-gpus: {gpus_min} GPUs on {nodes} node(s) needs {k} per node; "
                f"partition {where} has at most {per_node}"
            )
        added = [f"--gres=gpu:{k}"]
        n = nodes
    else:
        n = -(-gpus_min // per_node) if per_node else 0
        if n == 0:
            raise UsageError(f"--rl-gpus: partition {where} has no GPUs")
        k = -(-gpus_min // n)
        added = [f"--gres=gpu:{k}"] + ([f"--nodes={n}"] if n > 1 else [])
    if k * n > gpus_max:
        raise UsageError(
            f"--rl-gpus: {gpus_min}-{gpus_max}: the smallest even split over {n} node(s) is "
            f"{k * n} GPUs ({k} per node); widen the range or give --nodes"
        )
    return added


def _check_sbatch_request(requests: list[Opt], lo: int, hi: int, nodes: int | None) -> list[str]:
    if len(requests) > 1:
        names = " and ".join(f"--{o.name}" for o in requests)
        raise UsageError(f"--rl-gpus: can't tell the starting GPU count from both {names}")
    req = requests[0]
    value = req.value or ""
    if req.name == "gres":
        per = gres_gpu_count(value)
        start = None if per is None else per * (nodes or 1)
    elif req.name == "gpus-per-node":
        per = typed_count(value)
        start = None if per is None else per * (nodes or 1)
    elif req.name == "gpus":
        start = typed_count(value)
    else:
        raise UsageError(
            f"--rl-gpus can't be combined with --{req.name} (the total depends on placement); "
            "use --gres=gpu:N, --gpus-per-node=N or --gpus=N, or leave them out"
        )
    if start is None:
        return []  # sbatch will judge the value itself
    if not lo <= start <= hi:
        src = "" if req.where == "command line" else f" ({req.where})"
        raise UsageError(
            f"--rl-gpus: {lo}-{hi}: --{req.name}={brief(value)}{src} asks for {start} GPUs, "
            "outside the range"
        )
    return []

"""The grid file of `slurm-rl inference evaluate --grid` (TOML; docs/inference/grid-example.toml
is a small one), read and checked whole before any work starts:

    models = ["mobilenet", "my-net.json"]   # shipped profiles by name, or profile files
    loads = [0.3, 0.6]          # offered load of each stream, in (0, 10]
    seeds = [1]                 # stream seeds (and the agents' seed-k checkpoints)
    tasks = 12                  # tasks per episode
    schedulers = ["heft", "whole"]   # default: all (drm-dql, vanilla-dql need checkpoints)
    bandwidths_gbps = [1, 10]   # uniform links, for every cluster that gives no bandwidth
    [[cluster]]
    preset = "gpu"              # a mix of the built-in sweep (cluster.MIXES)
    [[cluster]]
    file = "site.toml"          # a --cluster file (relative to this file)
    [[cluster]]
    name = "two-t4"             # or the cluster inline, as a --cluster file writes it
    [[cluster.device]]
    type = "t4"
    count = 2

`seeds`, `tasks` and `loads` may be left out: the command's --seeds, --tasks, --load give
them. A cluster that gives its own `bandwidth_gbps` or `bandwidth_file` runs at that bandwidth
only (labelled by the number, or by the matrix file's name); every other cluster runs once per
`bandwidths_gbps`. `heft` always runs: it is the reference every ratio is taken to.

Each model must fit each cluster's memory (placed alone on it, as `inference place` does).
A problem raises GridError, one line naming the file, the table or key, and the value.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_rl.inference import cluster as cl
from slurm_rl.inference.plan import NoRoomError, place
from slurm_rl.inference.profile import Profile, ProfileError, resolve, shipped_names
from slurm_rl.inference.schedulers import EarliestFinish

SCHEDULERS = ("drm-dql", "vanilla-dql", "heft", "whole", "lookahead", "request-plan",
              "stream-plan")
AGENT_SCHEDULERS = {"drm-dql": "drm", "vanilla-dql": "vanilla"}
"""The schedulers that read a trained checkpoint (their `--agent` names)."""
REFERENCE = "heft"
KEYS = ("bandwidths_gbps", "cluster", "loads", "models", "schedulers", "seeds", "tasks")
CLUSTER_KEYS = ("name", "preset", "file", "source", "bandwidth_gbps", "bandwidth_file",
                "link_latency_s", "device")
"""The keys of a [[cluster]] table: its name, then one of preset, file or device (the rest as
in a cluster file)."""
MAX_LOAD = 10.0
MAX_TASKS = 100_000


class GridError(ValueError):
    """A malformed grid file (one line naming the file, the table or key, and the value)."""


@dataclass(frozen=True, kw_only=True)
class GridCluster:
    name: str
    bandwidth: float | str
    """The cell's bandwidth label: Gbit/s of uniform links, or the matrix file's name."""
    cluster: cl.Cluster


@dataclass(frozen=True, kw_only=True)
class Grid:
    clusters: tuple[GridCluster, ...]
    """One per cluster and bandwidth, in file order."""
    models: tuple[tuple[str, Profile], ...]
    """(the name as written, its profile)."""
    schedulers: tuple[str, ...]
    seeds: tuple[int, ...] | None = None
    tasks: int | None = None
    loads: tuple[float, ...] | None = None
    """None: not in the file (the command's option gives it)."""


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _list(doc: dict[str, Any], key: str, at: str) -> list[Any] | None:
    if key not in doc:
        return None
    value = doc[key]
    if not isinstance(value, list) or not value:
        raise GridError(f"{at}: {key}: expected a non-empty array, got {_describe(value)}")
    if len(set(map(repr, value))) != len(value):
        raise GridError(f"{at}: {key}: {_describe(value)} lists a value twice")
    return value


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _read_toml(path: Path, where: str) -> dict[str, Any]:
    """The TOML document at `path`; GridError, one line starting with `where`, if it cannot
    be read or is not TOML."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise GridError(f"{where}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise GridError(f"{where}: not TOML: {exc}") from None


def read_grid(path: Path) -> Grid:
    """The whole grid file, checked (GridError at the first problem)."""
    at = str(path)
    doc = _read_toml(path, at)
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise GridError(f"{at}: unknown key(s) {', '.join(unknown)} (valid: {', '.join(KEYS)})")

    bandwidths = _list(doc, "bandwidths_gbps", at)
    for v in bandwidths or ():
        if not (_number(v) and v > 0):
            raise GridError(f"{at}: bandwidths_gbps: {_describe(v)} is not a positive number "
                            "of Gbit/s")
    loads = _list(doc, "loads", at)
    for v in loads or ():
        if not (_number(v) and 0 < v <= MAX_LOAD):
            raise GridError(f"{at}: loads: {_describe(v)} is not a number in (0, {MAX_LOAD:g}]")
    seeds = _list(doc, "seeds", at)
    for v in seeds or ():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise GridError(f"{at}: seeds: {_describe(v)} is not a whole number >= 0")
    tasks = doc.get("tasks")
    if "tasks" in doc and (isinstance(tasks, bool) or not isinstance(tasks, int)
                           or not 1 <= tasks <= MAX_TASKS):
        raise GridError(f"{at}: tasks: {_describe(tasks)} is not a whole number in "
                        f"1..{MAX_TASKS}")
    names = _list(doc, "schedulers", at) or list(SCHEDULERS)
    for v in names:
        if v not in SCHEDULERS:
            raise GridError(f"{at}: schedulers: {_describe(v)} is not one of "
                            f"{', '.join(SCHEDULERS)}")
    if REFERENCE not in names:
        names.insert(0, REFERENCE)

    raw_models = _list(doc, "models", at)
    if raw_models is None:
        raise GridError(f"{at}: models: missing (shipped profile names or profile files)")
    models = [(m, _model(m, path.parent, at)) for m in raw_models]

    tables = doc.get("cluster")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict)
                                                             for t in tables):
        raise GridError(f"{at}: cluster: expected one or more [[cluster]] tables, got "
                        f"{_describe(tables)}")
    clusters: list[GridCluster] = []
    seen: set[str] = set()
    for k, table in enumerate(tables):
        made = _clusters(table, f"{at}: [[cluster]] {k}", path.parent, bandwidths)
        if made[0].name in seen:
            raise GridError(f"{at}: [[cluster]] {k}: name {made[0].name!r} is an earlier "
                            "cluster's (give each a distinct name)")
        seen.add(made[0].name)
        for name, prof in models:  # (memory does not depend on the bandwidth)
            try:
                place(prof, made[0].cluster, EarliestFinish())
            except NoRoomError as exc:
                what = str(exc) if name == prof.model else f"{name}: {exc}"
                raise GridError(f"{at}: [[cluster]] {k} ({made[0].name}): models: "
                                f"{what}") from None
        clusters += made
    return Grid(clusters=tuple(clusters), models=tuple(models), schedulers=tuple(names),
                seeds=tuple(seeds) if seeds is not None else None, tasks=tasks,
                loads=tuple(float(v) for v in loads) if loads is not None else None)


def _model(name: object, base: Path, at: str) -> Profile:
    if not isinstance(name, str) or not name:
        raise GridError(f"{at}: models: {_describe(name)} is not a model name or a path")
    written = Path(name)
    local = written if written.is_absolute() else base / written
    shipped = "/" not in name and name in shipped_names()
    try:
        return resolve(str(local) if not shipped and local.is_file() else name)
    except ProfileError as exc:
        hint = ("" if shipped or local.is_file() else "; a torch module is profiled into a "
                "profile file first (slurm-rl inference profile, docs/inference.md)")
        raise GridError(f"{at}: models: {exc}{hint}") from None


def _clusters(table: dict[str, Any], at: str, base: Path,
              bandwidths: list[Any] | None) -> list[GridCluster]:
    """One table's clusters: one, at its own bandwidth, or one per grid bandwidth."""
    unknown = sorted(set(table) - set(CLUSTER_KEYS))
    if unknown:
        raise GridError(f"{at}: unknown key(s) {', '.join(unknown)} "
                        f"(valid: {', '.join(CLUSTER_KEYS)})")
    given = [k for k in ("preset", "file", "device") if k in table]
    if len(given) != 1:
        raise GridError(f"{at}: give one of preset, file or [[cluster.device]] tables"
                        + (f", not {' and '.join(given)}" if given else ""))
    data = {k: v for k, v in table.items() if k not in ("name", "preset", "file")}
    where, folder = at, base
    if "preset" in table:
        preset = table["preset"]
        if preset not in cl.MIXES:
            raise GridError(f"{at}: preset: {_describe(preset)} is not one of "
                            f"{', '.join(cl.MIXES)}")
        data["device"] = [{"type": t} for t in cl.MIXES[preset]]
        default_name = str(preset)
    elif "file" in table:
        file = table["file"]
        if not isinstance(file, str) or not file:
            raise GridError(f"{at}: file: {_describe(file)} is not a path")
        if set(data):
            raise GridError(f"{at}: {', '.join(sorted(data))}: not with file (the cluster "
                            "file gives them)")
        p = base / file
        data = _read_toml(p, f"{at}: file: {file}")
        where, folder, default_name = f"{at}: file {file}", p.parent, p.stem
    else:
        default_name = f"cluster-{at.rsplit(' ', 1)[-1]}"
    name = table.get("name", default_name)
    if not isinstance(name, str) or not name.isascii() or not 0 < len(name) <= 64 or any(
            c in name for c in ",|\n"):
        raise GridError(f"{at}: name: {_describe(name)} is not 1..64 ASCII characters "
                        "without , or |")

    def build(extra: dict[str, Any]) -> cl.Cluster:
        try:
            return cl.from_table({**data, **extra}, where, folder)
        except cl.ClusterError as exc:
            raise GridError(str(exc)) from None

    if "bandwidth_file" in data and isinstance(data["bandwidth_file"], str):
        label: float | str = Path(data["bandwidth_file"]).name
        return [GridCluster(name=name, bandwidth=label, cluster=build({}))]
    if "bandwidth_gbps" in data:
        c = build({})
        return [GridCluster(name=name, bandwidth=float(data["bandwidth_gbps"]), cluster=c)]
    if "bandwidth_file" in data:
        build({})  # (raises: bandwidth_file is not a path)
    if bandwidths is None:
        raise GridError(f"{at}: no bandwidth_gbps or bandwidth_file, and the grid has no "
                        "bandwidths_gbps")
    return [GridCluster(name=name, bandwidth=float(g), cluster=build({"bandwidth_gbps": g}))
            for g in bandwidths]

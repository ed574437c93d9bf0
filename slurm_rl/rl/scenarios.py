"""The scenarios file of `slurm-rl train` (TOML; docs/rl/train.toml is the shipped
checkpoint's), read and checked whole before any work starts:

    [train]                 # any TrainConfig field (slurm-rl train --list-params)
    iterations = 40
    [[scenario]]            # training episodes: every trace x window x load x seed
    trace = "data:itp-deadline-cluster01.csv"
    windows = ["0:400", "1000:400"]
    loads = [0.8, 1.0]
    seeds = [0]             # optional; also format, gpus_per_node, and
    time_limit = { model = "tsafrir" }   # limits of jobs without one (docs/simulator.md)
    [[scenario]]            # or a generated workload family instead of a trace file:
    family = "diurnal"      # slurm-rl trace families (not a held-out one)
    jobs = 2000             # jobs per generated trace (default 2000)
    trace_seeds = [1, 2]    # generator seeds: one trace each (default [0])
    [[validation]]          # same keys; windows, clusters or generator seeds training does not see

A family's traces are generated once into the trace cache ($XDG_CACHE_HOME/slurm-rl/traces,
default ~/.cache/slurm-rl/traces; FAMILY-JOBS-seedSEED-DIGEST.csv, DIGEST a hash of the
family's definition) as `slurm-rl trace generate` writes them (the same family, jobs and seed
give the same file on any machine). Validation returns are reported per family
(the trainer's curve): a table's `family`, or its trace's file name.

Every key of every table is checked for its type and value; each trace must resolve (a path
as given, or data:NAME for a shipped one), read as its format, and hold jobs in each window;
each validation scenario must have a decision to make. HELD_OUT clusters (`splits.HELD_OUT`)
and held-out families (`workloads.HELD_OUT_FAMILIES`) are refused in both lists: they are
for evaluation only. A problem raises ValueError of one
line naming the table, the key and the value (the command adds the file).
"""

from __future__ import annotations

import hashlib
import math
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from slurm_rl.rl.env import Scenario, SchedulingEnv
from slurm_rl.sim import trace as tr
from slurm_rl.sim.config import describe_value, time_limit_from_table
from slurm_rl.sim.run import DATA_PREFIX, load_jobs, resolve_trace_path
from slurm_rl.sim.workloads import FAMILIES, HELD_OUT_FAMILIES, generate, write_csv
from slurm_rl.splits import HELD_OUT

TABLES = ("scenario", "train", "validation")
KEYS = ("family", "format", "gpus_per_node", "jobs", "loads", "seeds", "time_limit", "trace",
        "trace_seeds", "windows")
"""The keys of a [[scenario]] or [[validation]] table."""


def read_scenarios(path: Path, need_training: bool = True
                   ) -> tuple[dict[str, Any], tuple[Scenario, ...], tuple[Scenario, ...]]:
    """([train] overrides, training scenarios, validation scenarios). `need_training` False
    (fine-tuning --from-db): [[scenario]] and [[validation]] may be missing. The [train] table
    is returned as written: `from_table(TrainConfig, ...)` checks it."""
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"invalid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ValueError("not a text file (TOML)") from None
    unknown = sorted(set(doc) - set(TABLES))
    if unknown:
        raise ValueError(f"unknown table(s) {', '.join(unknown)} (valid: {', '.join(TABLES)})")
    overrides = doc.get("train", {})
    if not isinstance(overrides, dict):
        raise ValueError(f"train: must be a table ([train]), got {describe_value(overrides)}")
    train = _entries(doc.get("scenario", []), "scenario")
    val = _entries(doc.get("validation", []), "validation")
    if need_training and (not train or not val):
        raise ValueError("need at least one [[scenario]] and one [[validation]]")
    _check_traces(train + val)
    _check_decisions(train, val)
    return dict(overrides), tuple(s for _, s in train), tuple(s for _, s in val)


def _entries(tables: object, where: str) -> list[tuple[str, Scenario]]:
    """(the table's name in messages, a scenario) for every scenario the tables expand to."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ValueError(f"{where}: must be tables ([[{where}]]), got {describe_value(tables)}")
    out = []
    for n, table in enumerate(tables, 1):
        at = f"[[{where}]] #{n}"
        for sc in _expand(table, at):
            out.append((at, sc))
    return out


def _expand(e: dict[str, Any], at: str) -> list[Scenario]:
    """One table's scenarios, every key checked (ValueError naming `at`, the key, the value)."""
    unknown = sorted(set(e) - set(KEYS))
    if unknown:
        raise ValueError(f"{at}: unknown key(s) {', '.join(unknown)} "
                         f"(valid: {', '.join(KEYS)})")
    if "family" in e:
        return [sc for trace in _family_traces(e, at) for sc in _expand_trace(
            {k: v for k, v in e.items() if k not in ("family", "jobs", "trace_seeds")},
            at, trace, "itp", e["family"])]
    for key in ("jobs", "trace_seeds"):
        if key in e:
            raise ValueError(f"{at} {key}: only with family (a generated workload)")
    if "trace" not in e:
        raise ValueError(f"{at}: no trace (a path, or {DATA_PREFIX}NAME for a shipped one) "
                         "and no family")
    trace = e["trace"]
    if not isinstance(trace, str) or not trace:
        raise ValueError(f"{at} trace: expected a path (a non-empty string), got "
                         f"{describe_value(trace)}")
    if any(f"cluster{c}" in trace for c in HELD_OUT):
        raise ValueError(f"{at}: {trace} is a HELD_OUT cluster (evaluation only)")
    _check_trace_path(at, trace)
    label = Path(trace.removeprefix(DATA_PREFIX)).stem
    return _expand_trace(e, at, trace, e.get("format", tr.TraceFormat.ITP_DEADLINE.value),
                         label)


def trace_cache() -> Path:
    """Where generated family traces are written: $XDG_CACHE_HOME/slurm-rl/traces."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "slurm-rl" / "traces"


def _family_traces(e: dict[str, Any], at: str) -> list[str]:
    """The generated traces of a `family` table (written to the cache where missing)."""
    for key in ("trace", "format"):
        if key in e:
            raise ValueError(f"{at} {key}: not with family (a generated trace, format itp)")
    family = e["family"]
    if not isinstance(family, str) or family not in FAMILIES:
        what = repr(family) if isinstance(family, str) else describe_value(family)
        raise ValueError(f"{at} family: unknown family {what} (valid: "
                         f"{', '.join(f for f in FAMILIES if f not in HELD_OUT_FAMILIES)})")
    if family in HELD_OUT_FAMILIES:
        raise ValueError(f"{at} family: {family} is held out of training (evaluation only; "
                         f"held out: {', '.join(HELD_OUT_FAMILIES)})")
    jobs = e.get("jobs", 2000)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"{at} jobs: expected a whole number of at least 1, got "
                         f"{describe_value(jobs)}")
    seeds = _list(e, "trace_seeds", at, [0])
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int):
            raise ValueError(f"{at} trace_seeds: expected whole numbers, got "
                             f"{describe_value(s)}")
    # The file name carries a digest of the family's definition, so that a changed family
    # is generated again instead of read from a file made before the change.
    digest = hashlib.sha1(repr(FAMILIES[family]).encode()).hexdigest()[:8]
    out = []
    for s in seeds:
        path = trace_cache() / f"{family}-{jobs}-seed{s}-{digest}.csv"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_csv(generate(family, jobs, s), str(path))
        out.append(str(path))
    return out


def _expand_trace(e: dict[str, Any], at: str, trace: str, fmt: Any, label: str
                  ) -> list[Scenario]:
    """The scenarios of one trace: the table's windows x loads x seeds."""
    formats = [f.value for f in tr.TraceFormat]
    if fmt not in formats:
        raise ValueError(f"{at} format: unknown format {fmt!r} (valid: {', '.join(formats)})")
    gpus = e.get("gpus_per_node", 4)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"{at} gpus_per_node: expected a whole number of at least 1, got "
                         f"{describe_value(gpus)}")
    windows = _list(e, "windows", at, [None])  # (None: the whole trace)
    for w in windows if "windows" in e else ():
        if not isinstance(w, str):
            raise ValueError(f"{at} windows: expected START:COUNT strings, got {describe_value(w)}")
        try:
            tr.parse_window(w)
        except ValueError as exc:
            raise ValueError(f"{at} windows: {exc}") from None
    loads = _list(e, "loads", at, [1.0])
    for load in loads:
        if (isinstance(load, bool) or not isinstance(load, int | float)
                or not 0 < load < math.inf):
            raise ValueError(f"{at} loads: expected numbers more than 0, got "
                             f"{describe_value(load)}")
    seeds = _list(e, "seeds", at, [0])
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int):
            raise ValueError(f"{at} seeds: expected whole numbers, got {describe_value(s)}")
    limit = (time_limit_from_table(e["time_limit"], label=f"{at} time_limit: ")
             if "time_limit" in e else None)
    return [Scenario(trace=trace, window=w, load=float(load), seed=s, fmt=fmt,
                     gpus_per_node=gpus, time_limit=limit, family=label)
            for w in windows for load in loads for s in seeds]


def _list(e: dict[str, Any], key: str, at: str, default: list[Any]) -> list[Any]:
    if key not in e:
        return default
    value = e[key]
    if not isinstance(value, list):
        raise ValueError(f"{at} {key}: expected an array, got {describe_value(value)}")
    if not value:
        raise ValueError(f"{at} {key}: empty (leave the key out for its default)")
    return value


def _check_trace_path(at: str, trace: str) -> None:
    try:
        path = resolve_trace_path(trace)
    except FileNotFoundError as exc:  # data:NAME that is not shipped: the message lists them
        raise ValueError(f"{at} trace: {exc}") from None
    if path.is_file():
        return
    hint = ""
    if (resources.files("slurm_rl") / "data" / "traces" / Path(trace).name).is_file():
        hint = f" (the shipped trace is {DATA_PREFIX}{Path(trace).name})"
    raise ValueError(f"{at} trace: no such file: {trace}{hint}")


def _check_traces(entries: list[tuple[str, Scenario]]) -> None:
    """Each trace reads as its format (once per trace and format) and each window holds
    jobs."""
    read: dict[tuple[str, str], int] = {}
    for at, sc in entries:
        key = (sc.trace, sc.fmt)
        if key not in read:
            try:
                read[key] = len(load_jobs(resolve_trace_path(sc.trace), sc.fmt))
            except tr.TraceFormatError as exc:  # (its hint names simulate's --format)
                text = str(exc).removeprefix(exc.path).rsplit(": use --format", 1)[0]
                raise ValueError(f"{at} trace: {sc.trace}{text}: set format = "
                                 f"\"{exc.guessed.value}\"") from None
            except (tr.TraceError, OSError, ValueError) as exc:
                raise ValueError(f"{at} trace: {exc}") from None
        if sc.window is not None:
            start, _ = tr.parse_window(sc.window)
            if start >= read[key]:
                raise ValueError(f"{at} windows: {sc.window!r} starts after the last job "
                                 f"({sc.trace} has {read[key]})")


def _check_decisions(train: list[tuple[str, Scenario]],
                     val: list[tuple[str, Scenario]]) -> None:
    """Each validation scenario, and at least one training scenario, has a decision to make
    (a job that waits while another could start): a validation episode without one can not
    be scored, and training draws only scenarios that have one."""
    for at, sc in val:
        if not _has_decision(sc):
            raise ValueError(f"{at}: no decision to make in {sc.trace} window {sc.window} at "
                             f"load {sc.load:g}: every job starts on arrival (raise the load "
                             "or the window)")
    if train and not any(_has_decision(sc) for _, sc in train):
        raise ValueError("[[scenario]]: no decision to make in any training scenario: every "
                         "job starts on arrival (raise the loads or the windows)")


def _has_decision(sc: Scenario) -> bool:
    try:
        SchedulingEnv((sc,)).reset(options={"scenario": 0})
    except ValueError:  # (the env's "no decision point"; the trace itself was checked)
        return False
    return True

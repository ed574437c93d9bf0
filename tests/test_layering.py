"""The package layering of docs/design.md ("Layers"), kept by a test: every import between the
project's modules (at the top of a file or inside a function: a lazy import is still an arrow)
goes from a layer to one it may use, and no two modules import each other, directly or round
a longer loop. Third-party modules that must stay off a layer's import path are checked too
(click never and torch only lazily on the policy side; nothing heavy at the top of rlsbatch's
modules).

Pure: reads the source files with `ast`, imports nothing of the project.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = {"slurm_rl": ROOT / "slurm_rl", "slurm_rl.submit": ROOT / "submit",
                "slurm_rl.db": ROOT / "db"}
"""setup.cfg's package_dir: submit/ and db/ install as slurm_rl.submit and slurm_rl.db."""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # (layer, module prefixes): the first layer whose prefix matches a module is its layer;
    # a prefix names a module or a package and everything in it.
    ("apps", ("slurm_rl.cli", "slurm_rl.daemon", "slurm_rl.replay", "slurm_rl.demo",
              "slurm_rl.nvml_agent", "slurm_rl.trust_lua", "slurm_rl.db.cli",
              "slurm_rl.submit.cli", "slurm_rl.submit.cmdline", "slurm_rl.submit.deadline_only",
              "slurm_rl.submit.feedback", "slurm_rl.submit.gpus", "slurm_rl.submit.rlflags",
              "slurm_rl.submit.sbatch_options", "slurm_rl.submit.script",
              "slurm_rl.submit.errors")),
    ("trainer", ("slurm_rl.rl",)),
    ("inference", ("slurm_rl.inference",)),
    ("simulator", ("slurm_rl.sim",)),
    ("executor", ("slurm_rl.executor",)),
    ("policies", ("slurm_rl.policies",)),
    ("adapters", ("slurm_rl.slurm", "slurm_rl.db", "slurm_rl.submit.intent",
                  "slurm_rl.submit.tags", "slurm_rl.submit.grants", "slurm_rl.progress")),
    ("core", ("slurm_rl.core", "slurm_rl.states", "slurm_rl.checks", "slurm_rl.config",
              "slurm_rl.params", "slurm_rl.perfmodel", "slurm_rl.gpu_extra",
              "slurm_rl.splits", "slurm_rl.cli_common", "slurm_rl.checkpoint_errors")),
)
"""Any module must be named here (but the package fronts below), so that a new one is placed
on purpose (`test_every_module_has_a_layer`): a new module in submit/ too, where rlsbatch's
command side is apps and its codec adapters."""
PACKAGE_FRONTS = {"slurm_rl": "core", "slurm_rl.submit": "adapters"}
"""Package `__init__`s whose layer is not their modules': the top package's own is core,
submit/'s (rlsbatch's package, import-light) adapters; each names that module alone."""

MAY_USE: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "adapters": frozenset({"core"}),
    "policies": frozenset({"core"}),
    "executor": frozenset({"core"}),
    "simulator": frozenset({"core", "policies", "executor", "adapters"}),
    "inference": frozenset({"core", "adapters"}),
    "trainer": frozenset({"core", "policies", "executor", "simulator", "adapters"}),
    "apps": frozenset({"core", "adapters", "policies", "executor", "simulator", "inference",
                       "trainer"}),
}
"""Which layers each layer may import (its own always). Policies are pure decision logic: they
see the core types only, never Slurm, the database, the simulator or the trainer."""

NEVER: dict[str, frozenset[str]] = {
    "policies": frozenset({"click", "sqlalchemy", "subprocess", "gymnasium", "matplotlib"}),
    "core": frozenset({"torch", "sqlalchemy", "gymnasium", "matplotlib"}),
}
"""Third-party (and standard) modules a layer never imports, even lazily."""

NEVER_AT_TOP: dict[str, frozenset[str]] = {
    "policies": frozenset({"torch"}),
    "core": frozenset({"click", "numpy"}),
}
"""What a layer imports only lazily, inside the function that needs it: torch only where a
checkpoint file is read, so that listing or building any other policy never loads it."""

RLSBATCH_NEVER = frozenset({"torch", "numpy", "sqlalchemy", "gymnasium", "matplotlib"})
"""rlsbatch's own modules (slurm_rl.submit.*) import none of these at their top level: the
command must start fast and must not need the [rl] extra."""


@dataclass(frozen=True, kw_only=True)
class Import:
    target: str
    line: int
    top_level: bool


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder)
            if "migrations" in rel.parts:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            if name in found:  # slurm_rl/submit would shadow submit/ (setup.cfg maps it)
                raise AssertionError(f"{name} is in two places: {found[name]} and {path}")
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    top = set(map(id, tree.body))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(target=alias.name, line=node.lineno, top_level=id(node) in top)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield Import(target=module, line=node.lineno, top_level=id(node) in top)
            for alias in node.names:  # `from pkg import submodule`
                sub = f"{module}.{alias.name}"
                if sub in MODULES:
                    yield Import(target=sub, line=node.lineno, top_level=id(node) in top)


def _project_target(target: str) -> str | None:
    """The project module an import names (the longest known prefix), or None."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in MODULES:
            return candidate
    return None


def layer_of(module: str) -> str:
    if module in PACKAGE_FRONTS:
        return PACKAGE_FRONTS[module]
    for layer, prefixes in LAYERS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return layer
    raise AssertionError(f"{module} is in no layer: add it to tests/test_layering.py LAYERS")


GRAPH: dict[str, dict[str, int]] = {}
for _name, _path in MODULES.items():
    edges: dict[str, int] = {}
    for _imp in _imports(_name, _path):
        _target = _project_target(_imp.target)
        if _target is not None and _target != _name:
            edges.setdefault(_target, _imp.line)
    GRAPH[_name] = edges


def test_every_module_has_a_layer() -> None:
    unplaced = []
    for m in MODULES:
        try:
            assert layer_of(m) in MAY_USE
        except AssertionError:
            unplaced.append(m)
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


def test_a_new_module_is_in_no_layer_until_it_is_placed() -> None:
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("slurm_rl.brand_new")
    assert layer_of("slurm_rl") == "core" and layer_of("slurm_rl.splits") == "core"


def _wrong_arrows(graph: dict[str, dict[str, int]]) -> list[str]:
    wrong = []
    for module, edges in sorted(graph.items()):
        mine = layer_of(module)
        for target, line in sorted(edges.items()):
            theirs = layer_of(target)
            # A package's own __init__ (its narrow front, or the registry) is in reach of the
            # modules inside it.
            if theirs != mine and theirs not in MAY_USE[mine] and not module.startswith(
                    target + "."):
                wrong.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {module} ({mine}) "
                             f"imports {target} ({theirs})")
    return wrong


def test_no_import_goes_to_a_layer_it_may_not_use() -> None:
    wrong = _wrong_arrows(GRAPH)
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(GRAPH):
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycles_between_modules() -> None:
    # A package __init__ that re-exports its modules is imported by them only for the package
    # itself, which Python loads first: such a pair is not a cycle of modules.
    cycles = []
    for component in _cycles():
        members = set(component)
        real = [m for m in component
                if any(t in members and not t.startswith(m + ".") and not m.startswith(t + ".")
                       for t in GRAPH[m])]
        if real:
            cycles.append(component)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("layer", sorted(NEVER))
def test_layers_keep_heavy_modules_off_their_path(layer: str) -> None:
    wrong = []
    for module, path in sorted(MODULES.items()):
        if layer_of(module) != layer:
            continue
        for imp in _imports(module, path):
            root = imp.target.split(".")[0]
            if root in NEVER[layer] or (imp.top_level and root in NEVER_AT_TOP[layer]):
                wrong.append(f"{path.relative_to(ROOT)}:{imp.line}: {imp.target}"
                             f"{' (at the top)' if imp.top_level else ''}")
    assert not wrong, f"{layer} imports what it never may:\n" + "\n".join(wrong)


def test_rlsbatch_modules_import_nothing_heavy_at_the_top() -> None:
    wrong = []
    for module, path in sorted(MODULES.items()):
        if not module.startswith("slurm_rl.submit"):
            continue
        for imp in _imports(module, path):
            if imp.top_level and imp.target.split(".")[0] in RLSBATCH_NEVER:
                wrong.append(f"{path.relative_to(ROOT)}:{imp.line}: {imp.target}")
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_a_wrong_arrow_and_a_cycle() -> None:
    """The rules can fail: a policy importing the simulator is against the layering, and two
    modules importing each other are a cycle."""
    planted = {**GRAPH, "slurm_rl.policies.fifo": {**GRAPH["slurm_rl.policies.fifo"],
                                                   "slurm_rl.sim.engine": 7}}
    assert _wrong_arrows(planted) == [
        "slurm_rl/policies/fifo.py:7: slurm_rl.policies.fifo (policies) imports "
        "slurm_rl.sim.engine (simulator)"]
    saved = dict(GRAPH)
    try:
        GRAPH["slurm_rl.policies.fifo"] = {**GRAPH["slurm_rl.policies.fifo"],
                                           "slurm_rl.core": 1}
        GRAPH["slurm_rl.core"] = {**GRAPH["slurm_rl.core"], "slurm_rl.policies.fifo": 1}
        assert any("slurm_rl.core" in c and "slurm_rl.policies.fifo" in c for c in _cycles())
    finally:
        GRAPH.clear()
        GRAPH.update(saved)

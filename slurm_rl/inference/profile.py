"""Layer profiles: a model as a topologically ordered list of layers (pure; no torch).

A profile file is JSON: `{"format": "slurm-rl-profile/1", "model": NAME, "input_bytes": N,
"layers": [{"name", "kind", "flops", "param_bytes", "out_bytes", "inputs": [i, ...]}, ...]}`.
`inputs` lists earlier layer indices; -1 is the model's input. Every number is a finite,
non-negative number below 2**53; anything else is refused with one line naming the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "slurm-rl-profile/1"
MAX_LAYERS = 100_000
_MAX = 2.0**53


class ProfileError(ValueError):
    """A malformed profile; the message is one line naming the file, layer and field."""


@dataclass(frozen=True, kw_only=True)
class Layer:
    name: str
    kind: str
    """The torch module's class name (Conv2d, ReLU, Linear, Add, ...)."""
    flops: float
    """Floating-point operations of one forward pass (torch's FLOP counter: 2 per MAC)."""
    param_bytes: float
    out_bytes: float
    """Bytes of the output activation (what a next layer on another device must receive)."""
    inputs: tuple[int, ...]
    """Indices of the layers whose outputs this layer reads; -1: the model's input."""
    in_bytes: float = 0.0
    """Bytes of all inputs (filled from `inputs` by `Profile`)."""

    @property
    def bytes_moved(self) -> float:
        """Memory traffic of one pass: inputs + weights + output (the roofline's bytes)."""
        return self.in_bytes + self.param_bytes + self.out_bytes


@dataclass(frozen=True, kw_only=True)
class Profile:
    model: str
    input_bytes: float
    layers: tuple[Layer, ...]

    @property
    def total_flops(self) -> float:
        return sum(lay.flops for lay in self.layers)

    @property
    def is_chain(self) -> bool:
        """Each layer reads only the layer before it (the DP bound applies)."""
        return all(lay.inputs == (i - 1,) for i, lay in enumerate(self.layers))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "model": self.model, "input_bytes": self.input_bytes,
                "layers": [{"name": lay.name, "kind": lay.kind, "flops": lay.flops,
                            "param_bytes": lay.param_bytes, "out_bytes": lay.out_bytes,
                            "inputs": list(lay.inputs)} for lay in self.layers]}


def _num(where: str, field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(f"{where}: {field} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or not 0 <= value < _MAX:
        raise ProfileError(f"{where}: {field} must be finite and in 0..2**53, not {value!r}")
    return float(value)


def _text(where: str, field: str, value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 200:
        raise ProfileError(f"{where}: {field} must be a string of 1..200 characters")
    return value


def from_json(data: object, source: str = "profile") -> Profile:
    """Validate a decoded profile; raise ProfileError (one line) at the first fault."""
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: expected a JSON object at the top level")
    if data.get("format") != FORMAT:
        raise ProfileError(f"{source}: format must be {FORMAT!r}, not {data.get('format')!r}")
    unknown = set(data) - {"format", "model", "input_bytes", "layers"}
    if unknown:
        raise ProfileError(f"{source}: unknown key(s) {sorted(unknown)}")
    model = _text(source, "model", data.get("model"))
    input_bytes = _num(source, "input_bytes", data.get("input_bytes"))
    raw = data.get("layers")
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_LAYERS:
        raise ProfileError(f"{source}: layers must be a list of 1..{MAX_LAYERS} layers")
    keys = {"name", "kind", "flops", "param_bytes", "out_bytes", "inputs"}
    layers: list[Layer] = []
    for i, e in enumerate(raw):
        where = f"{source}: layer {i}"
        if not isinstance(e, dict):
            raise ProfileError(f"{where}: expected an object")
        if set(e) != keys:
            missing, extra = keys - set(e), set(e) - keys
            raise ProfileError(f"{where}: " + (f"missing {sorted(missing)}" if missing
                                                 else f"unknown key(s) {sorted(extra)}"))
        inputs = e["inputs"]
        if not isinstance(inputs, list) or not inputs:
            raise ProfileError(f"{where}: inputs must be a non-empty list of layer indices")
        for j in inputs:
            if isinstance(j, bool) or not isinstance(j, int) or not -1 <= j < i:
                raise ProfileError(f"{where}: inputs: {j!r} is not -1 or an earlier layer's "
                                   f"index (0..{i - 1})")
        out_bytes = _num(where, "out_bytes", e["out_bytes"])
        in_bytes = sum(input_bytes if j == -1 else layers[j].out_bytes for j in inputs)
        layers.append(Layer(name=_text(where, "name", e["name"]),
                            kind=_text(where, "kind", e["kind"]),
                            flops=_num(where, "flops", e["flops"]),
                            param_bytes=_num(where, "param_bytes", e["param_bytes"]),
                            out_bytes=out_bytes, inputs=tuple(inputs), in_bytes=in_bytes))
    return Profile(model=model, input_bytes=input_bytes, layers=tuple(layers))


def load(path: str | Path) -> Profile:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{p}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{p}: not JSON: line {exc.lineno}: {exc.msg}") from None
    return from_json(data, str(p))


def save(profile: Profile, path: str | Path) -> None:
    Path(path).write_text(json.dumps(profile.to_json(), indent=1) + "\n", encoding="utf-8")


SHIPPED_DIR = Path(__file__).resolve().parent.parent / "data" / "inference" / "profiles"


def shipped_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in SHIPPED_DIR.glob("*.json")))


def resolve(name_or_path: str) -> Profile:
    """A shipped profile by model name (vgg, resnet, ...) or a profile file's path."""
    shipped = SHIPPED_DIR / f"{name_or_path}.json"
    if "/" not in name_or_path and shipped.is_file():
        return load(shipped)
    if Path(name_or_path).is_file():
        return load(name_or_path)
    raise ProfileError(f"{name_or_path}: neither a shipped profile ({', '.join(shipped_names())})"
                       " nor a profile file")

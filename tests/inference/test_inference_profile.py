"""inference/profile.py and profiler.py: layer profiles from torch modules on the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_rl.inference import models, profiler
from slurm_rl.inference.profile import ProfileError, load, resolve, shipped_names


def test_five_structures_ship_and_match_a_fresh_profile() -> None:
    assert set(shipped_names()) == {"vgg", "resnet", "mobilenet", "bert", "gpt"}
    for name in shipped_names():
        model, x = models.build(name, "meta")
        fresh = profiler.profile_module(model, x, name)
        assert fresh == resolve(name), f"{name}: shipped profile is stale (regenerate it)"


def test_graph_structure_and_counts() -> None:
    vgg, resnet = resolve("vgg"), resolve("resnet")
    assert vgg.is_chain and resolve("mobilenet").is_chain
    assert not resnet.is_chain and not resolve("gpt").is_chain
    adds = [lay for lay in resnet.layers if lay.kind == "Add"]
    assert len(adds) == 8 and all(len(a.inputs) == 2 for a in adds)
    conv = vgg.layers[0]  # Conv2d(3, 64, 3) on 112x112: 2 FLOPs per MAC
    assert conv.flops == 2 * 64 * 3 * 9 * 112 * 112
    assert conv.param_bytes == (64 * 3 * 9 + 64) * 4
    assert conv.out_bytes == 64 * 112 * 112 * 4
    relu = vgg.layers[1]
    assert relu.kind == "ReLU" and relu.flops == 0 and relu.bytes_moved == 2 * conv.out_bytes
    attn = [lay for lay in resolve("bert").layers if lay.kind == "SelfAttention"]
    assert len(attn) == 4 and all(a.flops == 2 * 2 * 128 * 128 * 256 for a in attn)


def test_calibration_fits_a_roofline() -> None:
    pts = [(1e9, 1e6, 1e-5 + 1e9 / 5e10), (0.0, 1e8, 1e-5 + 1e8 / 1e10),
           (2e9, 1e6, 1e-5 + 2e9 / 5e10), (0.0, 5e7, 1e-5 + 5e7 / 1e10)]
    cal = profiler.calibrate(pts)
    assert cal.median_abs_rel_error < 0.01
    assert cal.flops_per_s == pytest.approx(5e10, rel=0.01)


def _write(tmp_path: Path, data: object) -> Path:
    p = tmp_path / "p.json"
    p.write_text(json.dumps(data))
    return p


def _good() -> dict[str, object]:
    return {"format": "slurm-rl-profile/1", "model": "m", "input_bytes": 4.0,
            "layers": [{"name": "a", "kind": "Linear", "flops": 8, "param_bytes": 4,
                        "out_bytes": 4, "inputs": [-1]}]}


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(format="x"), "format must be"),
    (lambda d: d["layers"][0].update(flops=-1), "layer 0: flops must be finite"),
    (lambda d: d["layers"][0].update(flops="1"), "layer 0: flops must be a number"),
    (lambda d: d["layers"][0].update(inputs=[0]), "layer 0: inputs: 0 is not -1 or an earlier"),
    (lambda d: d["layers"][0].pop("out_bytes"), "layer 0: missing ['out_bytes']"),
    (lambda d: d.update(layers=[]), "layers must be a list"),
    (lambda d: d.update(extra=1), "unknown key(s) ['extra']"),
])
def test_malformed_profiles_get_one_line_errors(tmp_path: Path, edit, message) -> None:  # type: ignore[no-untyped-def]
    data = _good()
    edit(data)
    with pytest.raises(ProfileError) as err:
        load(_write(tmp_path, data))
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(tmp_path / "p.json") in str(err.value)


def test_not_json(tmp_path: Path) -> None:
    p = tmp_path / "p.json"
    p.write_text("{nope")
    with pytest.raises(ProfileError, match="not JSON: line 1"):
        load(p)

"""`slurm-rl inference ...`: the commands, their outputs and their one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from slurm_rl.cli import main
from slurm_rl.inference.profile import load


def _cluster(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_place_prints_stages_and_latency(tmp_path: Path) -> None:
    c = _cluster(tmp_path, 'bandwidth_gbps = 100\n[[device]]\ntype = "t4"\ncount = 2\n'
                           '[[device]]\ntype = "a100"\n')
    for sched in ("heft", "whole", "drm-dql"):
        res = CliRunner().invoke(main, ["inference", "place", "mobilenet", "--cluster", str(c),
                                        "--scheduler", sched])
        assert res.exit_code == 0, res.output
        assert res.output.startswith(f"# mobilenet by {sched}: predicted latency ")
        assert "stage " in res.output


def test_bad_inputs_exit_2_with_one_line(tmp_path: Path) -> None:
    good = _cluster(tmp_path, 'bandwidth_gbps = 10\n[[device]]\ntype = "t4"\n')
    bad_profile = tmp_path / "p.json"
    bad_profile.write_text(json.dumps({"format": "slurm-rl-profile/1", "model": "m",
                                       "input_bytes": 1, "layers": [{"name": "a"}]}))
    (tmp_path / "bw.csv").write_text("0,1,2\n1,0,2\n")
    bad_bw = tmp_path / "b.toml"
    bad_bw.write_text('bandwidth_file = "bw.csv"\n[[device]]\ntype = "t4"\ncount = 2\n')
    cases = [
        (["place", str(bad_profile), "--cluster", str(good)], "layer 0: missing"),
        (["place", "vgg", "--cluster", str(bad_bw)], "bw.csv: line 1: expected 2 values"),
        (["place", "vgg", "--cluster", str(tmp_path / "none.toml")], "cannot read"),
        (["evaluate", "--seeds", "x"], "is not a comma-separated list"),
        (["evaluate", "--checkpoint-dir", str(tmp_path)], "drm-dql-s1.pt is missing"),
        (["train", "--param", "demonstrator=oracle", "--out-dir", str(tmp_path)],
         "demonstrator: 'oracle'"),
    ]
    for args, message in cases:
        res = CliRunner().invoke(main, ["inference", *args])
        assert res.exit_code == 2, (args, res.output)
        err = [line for line in res.output.splitlines() if line.startswith("Error:")]
        assert len(err) == 1 and message in err[0], res.output


def test_profile_command_regenerates_the_shipped_profiles(tmp_path: Path) -> None:
    # --out-dir is laid out as the shipped slurm_rl/data/inference: profiles/ inside it.
    out = tmp_path / "data"
    res = CliRunner().invoke(main, ["inference", "profile", "--no-time", "--out-dir", str(out)])
    assert res.exit_code == 0, res.output
    shipped = Path(__file__).resolve().parents[2] / "slurm_rl/data/inference/profiles"
    for name in ("vgg", "resnet", "mobilenet", "bert", "gpt"):
        assert load(out / "profiles" / f"{name}.json") == load(shipped / f"{name}.json")
        assert f"{name}: " in res.output


def test_train_param_errors_and_tiny_run(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["inference", "train", "--param", "gamma"])
    assert res.exit_code == 2 and "expected KEY=VALUE" in res.output
    res = CliRunner().invoke(main, ["inference", "train", "--param", "gamma=x"])
    assert res.exit_code == 2 and "'x' is not a float" in res.output
    res = CliRunner().invoke(main, ["inference", "train", "--list-params"])
    assert res.exit_code == 0 and "demo_episodes = 8" in res.output
    args = ["inference", "train", "--agent", "both", "--seeds", "4", "--episodes", "1",
            "--out-dir", str(tmp_path), "--curve-dir", str(tmp_path), "--tag", "-t",
            "--param", "demo_episodes=1", "--param", "pretrain_steps=5",
            "--param", "scenarios=1", "--param", "hidden=8", "--param", "learning_starts=10"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    for name in ("drm-dql-s4-t.pt", "vanilla-dql-s4-t.pt", "curves-drm-dql-t.csv",
                 "curves-vanilla-dql-t.csv", "learning_curves-t.png"):
        assert (tmp_path / name).stat().st_size > 0, name


def test_no_room_and_bad_checkpoint_are_one_line(tmp_path: Path) -> None:
    tiny = _cluster(tmp_path, 'bandwidth_gbps = 10\n[[device]]\nname = "edge"\n'
                              'flops_per_s = 1e12\nmem_bytes_per_s = 1e11\nmemory_bytes = 1e6\n'
                              'overhead_s = 0\n')
    res = CliRunner().invoke(main, ["inference", "place", "vgg", "--cluster", str(tiny),
                                    "--scheduler", "heft"])
    assert res.exit_code == 1
    assert res.output.strip() == ("Error: vgg: layer 0 (0) fits on no device's memory")
    good = _cluster(tmp_path, 'bandwidth_gbps = 10\n[[device]]\ntype = "t4"\n')
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    res = CliRunner().invoke(main, ["inference", "place", "vgg", "--cluster", str(good),
                                    "--checkpoint", str(junk)])
    assert res.exit_code == 2 and "not a DRM-DQL checkpoint" in res.output
    assert len([x for x in res.output.splitlines() if x.startswith("Error:")]) == 1

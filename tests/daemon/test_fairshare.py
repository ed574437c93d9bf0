"""The SiteFactor band fitted under slurmctld's fair-share weight (fairshare.py, pure), and
the settings read from `scontrol show config` output recorded on the test cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_rl.config import Actuation
from slurm_rl.daemon.actuator import RankScale
from slurm_rl.daemon.fairshare import FAIRSHARE_MARGIN, fit_band, min_top
from slurm_rl.slurm.priority import PrioritySettings, ShowConfigError, parse_priority_settings

RECORDED = Path(__file__).parents[1] / "fixtures" / "slurm" / "scontrol-show-config-22.05.txt"


def multifactor(weight: int) -> PrioritySettings:
    return PrioritySettings(type="priority/multifactor", weight_fairshare=weight)


def test_recorded_show_config_parses() -> None:
    # recorded with PriorityWeightFairshare=100, the test cluster's weight before the bound
    assert parse_priority_settings(RECORDED.read_text()) == multifactor(100)


@pytest.mark.parametrize("text", ["", "PriorityType = priority/multifactor\n"
                                      "PriorityWeightFairShare = lots\n",
                                  "PriorityType = priority/multifactor\n"
                                  "PriorityWeightFairShare = \u0661\u0660\u0660\n"])
def test_garbled_show_config_is_refused(text: str) -> None:
    with pytest.raises(ShowConfigError):
        parse_priority_settings(text)


def test_basic_priority_has_no_fairshare_weight() -> None:
    s = parse_priority_settings("PriorityType            = priority/basic\n")
    assert s == PrioritySettings(type="priority/basic", weight_fairshare=0)
    assert not s.fairshare_weighted


def test_a_weight_well_above_the_band_keeps_it() -> None:
    fit = fit_band(RankScale(), multifactor(FAIRSHARE_MARGIN * 10_000), Actuation.SITE_FACTOR)
    assert fit.scale == RankScale() and fit.warning is None and fit.refusal is None


@pytest.mark.parametrize("settings", [multifactor(0), PrioritySettings(
    type="priority/basic", weight_fairshare=500)])
def test_no_fairshare_in_play_keeps_the_band(settings: PrioritySettings) -> None:
    fit = fit_band(RankScale(), settings, Actuation.SITE_FACTOR)
    assert fit.scale == RankScale() and fit.warning is None and fit.refusal is None


def test_a_smaller_weight_scales_the_band_down_and_keeps_the_order() -> None:
    fit = fit_band(RankScale(), multifactor(100_000), Actuation.SITE_FACTOR)
    assert fit.refusal is None and fit.scale.top == 1000
    assert fit.warning is not None and "from 10000 to 1000" in fit.warning
    assert "PriorityWeightFairShare=100000" in fit.warning and "\n" not in fit.warning
    # the same order, value for value shifted: ties exactly where the full band has them
    ranks = [*range(200), *range(10**4, 10**7, 9973), 32 * 2**21 - 1]
    full = [RankScale().value(r) for r in ranks]
    fitted = [fit.scale.value(r) for r in ranks]
    assert [a - b for a, b in zip(full, fitted, strict=True)] == [9000] * len(ranks)


def test_the_smallest_band_that_keeps_the_order() -> None:
    need = min_top(RankScale())
    fit = fit_band(RankScale(), multifactor(FAIRSHARE_MARGIN * need), Actuation.SITE_FACTOR)
    assert fit.refusal is None and fit.scale.top == need
    assert need == 53
    kept = [*range(32), *(32 * 2**b for b in range(21))]  # each distinct rank, each bucket
    values = [fit.scale.value(r) for r in kept]
    assert values == sorted(set(values), reverse=True)  # all distinct, falling
    assert values[-1] == RankScale().floor
    one_less = RankScale(top=need - 1)
    assert one_less.value(kept[-1]) == one_less.value(kept[-2])  # the last two buckets merge


@pytest.mark.parametrize("weight", [100, FAIRSHARE_MARGIN * min_top(RankScale()) - 1])
def test_a_weight_too_small_for_the_order_is_refused(weight: int) -> None:
    fit = fit_band(RankScale(), multifactor(weight), Actuation.SITE_FACTOR)
    assert fit.refusal is not None and f"PriorityWeightFairShare={weight}" in fit.refusal
    assert str(FAIRSHARE_MARGIN * min_top(RankScale())) in fit.refusal
    # on SIGHUP the daemon goes on with the band that fits: fair share first
    assert fit.scale.top <= max(1, weight // FAIRSHARE_MARGIN)


def test_unknown_weight_takes_the_smallest_band_that_keeps_the_order() -> None:
    fit = fit_band(RankScale(), None, Actuation.SITE_FACTOR, "scontrol: Unable to contact")
    assert fit.refusal is None and fit.scale.top == min_top(RankScale())
    assert fit.warning is not None and "Unable to contact" in fit.warning


def test_strict_mode_warns_that_it_replaces_fairshare() -> None:
    fit = fit_band(RankScale(), multifactor(100), Actuation.PRIORITY)
    assert fit.refusal is None and fit.scale == RankScale()
    assert fit.warning is not None and "fair-share part" in fit.warning
    assert fit_band(RankScale(), multifactor(0), Actuation.PRIORITY).warning is None


def test_the_daemon_refuses_to_start_under_a_small_weight_in_one_line(tmp_path: Path) -> None:
    """The CLI's wiring, with a FAKE `scontrol` on PATH that answers `show config` with the
    recorded output (PriorityWeightFairShare=100): one line, exit 1, no database made."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "scontrol"
    fake.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'show config' ] && exec cat {RECORDED}\n"
                    "echo 'fake scontrol: only show config' >&2; exit 1\n")
    fake.chmod(0o755)
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=fake\n")
    db = tmp_path / "d.db"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_CONF": str(conf)}
    out = subprocess.run([str(Path(sys.executable).with_name("slurm-rl")), "daemon", "--once",
                          "--db", str(db)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "PriorityWeightFairShare=100 is too small" in lines[0], out.stderr
    assert "at least 5300" in lines[0] and not db.exists()

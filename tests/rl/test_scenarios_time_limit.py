"""A training scenario's `time_limit` table reaches the episodes' engine; a bad one is one line
naming the table and the key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from slurm_rl.rl.env import SchedulingEnv
from slurm_rl.rl.scenarios import read_scenarios
from slurm_rl.sim import tsafrir
from slurm_rl.sim.config import TimeLimitModel

FILE = """
[[scenario]]
trace = "data:itp-deadline-cluster03.csv"
windows = ["0:300"]
loads = [1.0]
{limit}
[[validation]]
trace = "data:itp-deadline-cluster03.csv"
windows = ["1000:300"]
loads = [1.0]
"""


def scenarios(tmp_path: Path, limit: str) -> Path:
    path = tmp_path / "train.toml"
    path.write_text(FILE.format(limit=limit))
    return path


def pending_limits(env: SchedulingEnv) -> set[float]:
    """The limits of the jobs that wait at any decision point of one episode."""
    env.reset(options={"scenario": 0})
    seen: set[float] = set()
    done = False
    while not done:
        assert env._point is not None
        seen |= {j.time_limit_s for j in env._point.snapshot.pending
                 if j.time_limit_s is not None}
        _, _, done, _, _ = env.step(np.zeros((2, env.fcfg.max_jobs), np.float32))
    return seen


def test_the_scenarios_model_gives_the_limits(tmp_path: Path) -> None:
    _, (sc,), (val,) = read_scenarios(scenarios(
        tmp_path, 'time_limit = { model = "tsafrir", max_s = 172800 }'))
    assert sc.time_limit is not None and sc.time_limit.model is TimeLimitModel.TSAFRIR
    assert sc.time_limit.max_s == 172800 and val.time_limit is None
    env = SchedulingEnv((sc,))
    limits = pending_limits(env)
    assert env.sim is not None and env.sim.cfg.time_limit == sc.time_limit
    hist = tsafrir.histogram(max_s=172800, bins=sc.time_limit.bins,
                             head_share=tsafrir.HEAD_SHARE, max_share=None, seed=sc.seed)
    assert limits and all(t in hist.times or t % 3600 == 0 for t in limits)
    assert any(t % 3600 for t in limits)  # values factor (whole hours) never gives
    assert all(t % 3600 == 0 for t in pending_limits(SchedulingEnv((val,))))  # the default: factor


@pytest.mark.parametrize(("limit", "message"), [
    ('time_limit = { model = "tsafrir", round_up_s = 60 }',
     r"\[\[scenario\]\] #1 time_limit: round_up_s not read by model tsafrir"),
    ('time_limit = { model = "guess" }',
     r"\[\[scenario\]\] #1 time_limit: model: unknown time-limit model 'guess'"),
    ('time_limit = "tsafrir"', r"\[\[scenario\]\] #1 time_limit: must be a table"),
])
def test_a_bad_table_is_refused(tmp_path: Path, limit: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_scenarios(scenarios(tmp_path, limit))

"""benchmarks/deadline_bound.py: the deadlines no policy can beat. A job is meetable exactly
when its fastest count in its range, started at submission, ends by its deadline; and no
policy simulated on the same scenario meets more."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.deadline_bound import bound  # noqa: E402
from slurm_rl.sim.evaluate import plan, read_scenarios, run_task  # noqa: E402

# resnet50 at batch 64: 1 GPU takes `duration`; more GPUs are faster by the throughput curve.
TRACE = """job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration
a,0,1000,resnet50,1100,64,1,1000
b,0,1000,resnet50,999,64,1,1000
c,0,1000,resnet50,50,64,1,1000
d,10,2000,resnet50,2500,64,2,1000
e,20,1000,resnet50,600,64,1,1000
f,30,1000,resnet50,1500,64,1,1000
"""


def scenario(tmp_path: Path, elastic: float) -> Path:
    (tmp_path / "t.csv").write_text(TRACE)
    path = tmp_path / "s.toml"
    path.write_text(f"""[evaluate]
policies = ["fifo", "edf", "deadline"]
nodes = 2
gpus_per_node = 4
[engine]
tick_s = 60.0
elastic_fraction = {elastic}
[[trace]]
name = "t"
path = "t.csv"
format = "itp-deadline"
""")
    return path


@pytest.mark.parametrize("elastic", [0.0, 1.0])
def test_no_policy_meets_more_deadlines_than_the_bound(tmp_path: Path, elastic: float) -> None:
    path = scenario(tmp_path, elastic)
    ((name, _, _, n, met),) = bound(path)
    assert (name, n) == ("t", 6)
    # rigid: a (1000 s <= 1100) and d and f; b misses by 1 s, c and e can not make it at 1 GPU.
    # elastic (up to the cluster's 8 GPUs): b and e too (resnet50 at 2+ GPUs takes < 600 s);
    # c needs 1000 s of work in 50 s, more than 8 GPUs give.
    assert met == (3 if elastic == 0.0 else 5)
    for task in plan(read_scenarios(path)):
        hits = round(run_task(task)["deadline_hit_rate"] * n)
        assert hits <= met, (task.policy, hits, met)

"""The GPU range rule (submit/gpus.py), on sinfo output recorded from the test cluster."""

from __future__ import annotations

import pytest

from slurm_rl.submit.cmdline import Opt
from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.gpus import PartitionGpus, gres_gpu_count, parse_sinfo, plan_gpus

# `sinfo -h -a -o '%P|%D|%G'` on the 4-node test cluster (4 GPUs per node), and a made-up
# site with a second partition of typed GPUs.
SINFO_TEST_CLUSTER = "gpu*|4|gpu:4\n"
SINFO_TWO_PARTITIONS = "gpu*|4|gpu:4\nbig|2|gpu:a100:8(S:0-1)\nbig|1|gpu:a100:4,gpu:t4:2\n"
CL = "command line"


@pytest.mark.parametrize(
    ("spec", "count"),
    [("gpu", 1), ("gpu:2", 2), ("gpu:a100:4", 4), ("gpu:a100", 1), ("gpu:2,nic:1", 2),
     ("nic:1", None), ("gres/gpu:3", 3), ("gpu:4(S:0-1)", 4), ("gpu:a:1,gpu:b:2", 3),
     ("(null)", None), ("", None)],
)
def test_gres_gpu_count(spec: str, count: int | None) -> None:
    assert gres_gpu_count(spec) == count


def test_parse_sinfo() -> None:
    assert parse_sinfo(SINFO_TEST_CLUSTER) == {"gpu": (True, 16, 4)}
    assert parse_sinfo(SINFO_TWO_PARTITIONS) == {"gpu": (True, 16, 4), "big": (False, 22, 8)}


def plan(lo: int, hi: int, cmdline: list[Opt] | None = None, env: dict[str, str] | None = None,
         script: list[Opt] | None = None, sinfo: str = SINFO_TEST_CLUSTER) -> list[str]:
    parts: PartitionGpus = parse_sinfo(sinfo)
    return plan_gpus(lo, hi, cmdline or [], env or {}, script or [], lambda: parts)


def test_the_minimum_becomes_the_first_request() -> None:
    assert plan(2, 8) == ["--gres=gpu:2"]
    assert plan(4, 4) == ["--gres=gpu:4"]
    assert plan(6, 8) == ["--gres=gpu:3", "--nodes=2"]
    assert plan(16, 16) == ["--gres=gpu:4", "--nodes=4"]
    assert plan(5, 8) == ["--gres=gpu:3", "--nodes=2"]


def test_user_nodes_are_kept() -> None:
    assert plan(4, 8, [Opt("nodes", "2", CL)]) == ["--gres=gpu:2"]
    assert plan(3, 8, [Opt("nodes", "2-3", CL)]) == ["--gres=gpu:2"]
    with pytest.raises(UsageError, match="needs 5 per node; partition gpu has at most 4"):
        plan(10, 16, [Opt("nodes", "2", CL)])


def test_uneven_splits_must_stay_in_range() -> None:
    with pytest.raises(UsageError, match="smallest even split over 2 node\\(s\\) is 6 GPUs"):
        plan(5, 5)


def test_more_gpus_than_the_partition_has() -> None:
    with pytest.raises(UsageError, match="^--rl-gpus: 2-64: partition gpu has only 16 GPUs"):
        plan(2, 64)
    assert plan(2, 20, [Opt("partition", "big", CL)], sinfo=SINFO_TWO_PARTITIONS) == [
        "--gres=gpu:2"]
    with pytest.raises(UsageError, match="sinfo shows no partition 'nope'"):
        plan(1, 2, env={"SBATCH_PARTITION": "nope"})


def test_an_sbatch_gpu_request_sets_the_start_and_must_be_in_range() -> None:
    assert plan(1, 4, [Opt("gres", "gpu:2", CL)]) == []
    assert plan(2, 8, [Opt("gpus-per-node", "a100:2", CL), Opt("nodes", "2", CL)]) == []
    assert plan(2, 8, env={"SBATCH_GPUS": "3"}) == []
    assert plan(1, 4, [Opt("gres", "nic:1", CL)]) == ["--gres=gpu:1"]  # asks for no GPU
    with pytest.raises(UsageError, match="--gres=gpu:4 \\(job.sh line 2\\) asks for 8 GPUs"):
        plan(1, 4, [Opt("nodes", "2", CL)], script=[Opt("gres", "gpu:4", "job.sh line 2")])


def test_the_command_line_beats_env_and_script() -> None:
    # the script asks for 8, the command line for 2: sbatch uses 2, which is in range
    assert plan(1, 4, [Opt("gpus", "2", CL)], script=[Opt("gpus", "8", "s line 2")]) == []
    with pytest.raises(UsageError, match="asks for 8 GPUs"):
        plan(1, 4, env={"SBATCH_GPUS": "8"}, script=[Opt("gpus", "2", "s line 2")])


@pytest.mark.parametrize(
    ("opts", "message"),
    [([Opt("gpus-per-task", "1", CL)], "can't be combined with --gpus-per-task"),
     ([Opt("gpus-per-socket", "1", CL)], "can't be combined with --gpus-per-socket"),
     ([Opt("gres", "gpu:1", CL), Opt("gpus", "2", CL)], "from both --gres and --gpus")],
)
def test_requests_we_can_not_count(opts: list[Opt], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        plan(1, 4, opts)

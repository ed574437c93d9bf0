"""The executor layer without Slurm (slurm_rl/executor.py): the squeue parser on output
recorded from the test cluster, the local runner, and the CLI's usage errors. The Slurm runner
itself is tested on the real cluster in test_executor_slurm.py."""

from __future__ import annotations

import math
from pathlib import Path

from click.testing import CliRunner

from slurm_rl.executor import LocalRunner, _task_error, parse_squeue_states
from slurm_rl.sim.evaluate import evaluate
from slurm_rl.states import JobState

# `squeue -h -r -t all -j 1,4,5 -o "%i|%T"` on the test cluster (Slurm 22.05): a finished
# array, a cancelled single job, a held array; then the same array without -r (one combined
# line, which the parser leaves out).
RECORDED = """4|CANCELLED
1_0|COMPLETED
1_1|COMPLETED
1_2|COMPLETED
5_0|PENDING
5_1|PENDING
5_2|PENDING
5_[0-2]|PENDING
7_0|CANCELLED by 0
8_1|NOT_A_STATE
"""


def test_squeue_states_parse_per_task() -> None:
    got = parse_squeue_states(RECORDED)
    assert got == {"4": JobState.CANCELLED, "1_0": JobState.COMPLETED,
                   "1_1": JobState.COMPLETED, "1_2": JobState.COMPLETED,
                   "5_0": JobState.PENDING, "5_1": JobState.PENDING, "5_2": JobState.PENDING,
                   "7_0": JobState.CANCELLED}
    assert parse_squeue_states("") == {}


def test_a_task_error_is_its_exception_line() -> None:
    # submitit's FailedJobError text, as recorded from a task that raised on the test cluster.
    trace = ("Job (task=0) failed during processing with trace:\n----------------------\n"
             "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
             "ValueError: math domain error\n\n----------------------\n"
             "You can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:\n"
             "  - /tmp/f/4_0_log.err\n  - /tmp/f/4_0_log.out")
    assert _task_error(trace) == "ValueError: math domain error"


def test_local_runner_in_process_and_in_processes_agree() -> None:
    items = [1.0, 2.0, 9.0]
    one, two = LocalRunner(1), LocalRunner(2)
    try:
        assert one.map(math.sqrt, items) == two.map(math.sqrt, items) == [1.0, math.sqrt(2), 3.0]
    finally:
        one.close()
        two.close()


def test_slurm_flags_without_the_slurm_executor_are_a_usage_error(tmp_path: Path) -> None:
    toml = tmp_path / "e.toml"
    toml.write_text('[evaluate]\npolicies = ["fifo"]\nnodes = 2\n[[trace]]\nname = "t"\n'
                    'path = "data:itp-deadline-cluster03.csv"\nformat = "itp-deadline"\n'
                    'window = "0:20"\n')
    res = CliRunner().invoke(evaluate, ["--scenarios", str(toml), "--slurm-partition", "gpu",
                                        "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "--slurm-partition needs --executor slurm" in res.output
    assert not (tmp_path / "o").exists()

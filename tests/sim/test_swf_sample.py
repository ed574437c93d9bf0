"""The shipped SWF sample is what benchmarks/itp_to_swf.py makes of ITP cluster 01, and it
loads as the same jobs (NOTICE.md in slurm_rl/data/traces says so)."""

from __future__ import annotations

import importlib.util
from importlib import resources
from pathlib import Path

from slurm_rl.sim import trace

TRACES = Path(str(resources.files("slurm_rl") / "data" / "traces"))
REPO = Path(__file__).resolve().parents[2]


def test_swf_sample_is_the_conversion_of_itp_cluster01() -> None:
    spec = importlib.util.spec_from_file_location("itp_to_swf",
                                                  REPO / "benchmarks" / "itp_to_swf.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    made = tool.convert(TRACES / "itp-deadline-cluster01.csv", "cluster01")
    assert (TRACES / "itp-cluster01.swf").read_text() == "\n".join(made) + "\n"


def test_swf_sample_loads_as_the_itp_jobs() -> None:
    swf = trace.load(TRACES / "itp-cluster01.swf", "swf")
    itp = trace.load(TRACES / "itp-deadline-cluster01.csv", "itp-deadline")
    assert swf.skipped == 0 and len(swf.jobs) == len(itp.jobs) > 1000
    start = min(j.submit for j in itp.jobs)
    key = sorted((round(j.submit - start), round(j.duration), j.gpus) for j in itp.jobs)
    assert sorted((j.submit, j.duration, j.gpus) for j in swf.jobs) == key
    assert all(j.time_limit_s is None for j in swf.jobs)

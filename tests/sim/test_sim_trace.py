from __future__ import annotations

from pathlib import Path

import pytest

from slurm_rl.sim import trace
from slurm_rl.sim.run import resolve_trace_path
from slurm_rl.sim.trace import TraceError, TraceJob


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_itp_raw(tmp_path: Path) -> None:
    p = write(tmp_path, "raw.csv", "job_id,submission_time,duration,num_gpu\n"
                                   "b,20,100,2\na,10,50,1\n")
    t = trace.load(p, "itp")
    assert [j.id for j in t.jobs] == ["a", "b"]  # sorted by submit
    assert t.jobs[1] == TraceJob(id="b", submit=20.0, duration=100.0, gpus=2)


def test_itp_deadline_columns_by_name(tmp_path: Path) -> None:
    p = write(tmp_path, "dl.csv",
              "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,"
              "duration\nx,5,1000,resnet50,400,64,4,300\n")
    (j,) = trace.load(p, "itp-deadline").jobs
    assert (j.total_steps, j.model, j.deadline, j.batch_size, j.gpus, j.duration) == (
        1000, "resnet50", 400.0, 64, 4, 300.0)


def test_shipped_traces_load() -> None:
    t = trace.load(resolve_trace_path("data:itp-deadline-cluster10.csv"), "itp-deadline")
    assert len(t.jobs) == 260 and all(j.deadline is not None for j in t.jobs)


@pytest.mark.parametrize(("body", "line", "column", "words"), [
    ("a,1,xx,1\n", 2, "duration (3)", "could not convert"),
    ("a,1,10,1\nb,2,10,0\n", 3, "num_gpu (4)", "must be positive"),
    ("a,1,10,1\nb,2,-5,1\n", 3, "duration (3)", "negative duration"),
    ("a,1,10,1.5\n", 2, "num_gpu (4)", "not a whole number"),
    ("a,1,10\n", 2, None, "3 fields, the header has 4"),
])
def test_itp_errors_name_file_line_column(tmp_path: Path, body: str, line: int,
                                          column: str | None, words: str) -> None:
    p = write(tmp_path, "bad.csv", "job_id,submission_time,duration,num_gpu\n" + body)
    with pytest.raises(TraceError) as exc:
        trace.load(p, "itp")
    assert (exc.value.path, exc.value.line, exc.value.column) == (str(p), line, column)
    assert str(p) in str(exc.value) and f":{line}" in str(exc.value) and words in str(exc.value)


def test_missing_column(tmp_path: Path) -> None:
    p = write(tmp_path, "bad.csv", "job_id,submission_time,duration\na,1,2\n")
    with pytest.raises(TraceError, match=r"bad.csv:1: column num_gpu: missing"):
        trace.load(p, "itp")
    p = write(tmp_path, "raw.csv", "job_id,submission_time,duration,num_gpu\na,1,2,1\n")
    # The columns are ITP's: the error names that format and the column it lacks.
    with pytest.raises(TraceError, match=r"raw.csv looks like an ITP trace, not itp-deadline "
                                         r"\(no deadline column\): use --format itp$"):
        trace.load(p, "itp-deadline")


def test_philly_datetimes(tmp_path: Path) -> None:
    p = write(tmp_path, "philly.csv",
              "jobid,timestamp,duration,num_gpus,user\n"
              "j2,2017-10-03 10:00:30,60,8,bob\nj1,2017-10-03T10:00:00Z,30,1,alice\n"
              "j3,10/03/2017 10:01,5,2,\n")
    jobs = trace.load(p, "philly").jobs
    assert [j.id for j in jobs] == ["j1", "j2", "j3"]
    assert [j.submit - jobs[0].submit for j in jobs] == [0.0, 30.0, 60.0]
    assert jobs[0].user == "alice" and jobs[1].gpus == 8
    bad = write(tmp_path, "bad.csv", "timestamp,duration,num_gpus\nyesterday,1,1\n")
    with pytest.raises(TraceError, match=r"bad.csv:2: column timestamp \(1\): not a date-time"):
        trace.load(bad, "philly")


def test_swf(tmp_path: Path) -> None:
    p = write(tmp_path, "log.swf", """; Version: 2.2
; comment
1 0 5 100 4 -1 -1 4 3600 -1 1 7 1 -1 1 -1 -1 -1
2 10 0 -1 4 -1 -1 4 3600 -1 0 7 1 -1 1 -1 -1 -1
3 20 0 50 -1 -1 -1 2 -1 -1 1 8 1 -1 1 -1 -1 -1
""")
    t = trace.load(p, "swf")
    assert t.skipped == 1  # unknown run time
    a, b = t.jobs
    assert (a.id, a.submit, a.duration, a.gpus, a.time_limit_s, a.user) == (
        "1", 0.0, 100.0, 4, 3600.0, "7")
    assert (b.gpus, b.time_limit_s) == (2, None)  # requested processors; no limit
    bad = write(tmp_path, "bad.swf", "1 0 5 100 4 -1 -1 4 3600 -1 1 7 1 x 1 -1 -1 -1\n")
    with pytest.raises(TraceError, match=r"bad.swf:1: column field 14"):
        trace.load(bad, "swf")
    short = write(tmp_path, "short.swf", "1 0 5\n")
    with pytest.raises(TraceError, match="3 fields, SWF has 18"):
        trace.load(short, "swf")


def test_window() -> None:
    jobs = tuple(TraceJob(id=str(i), submit=i, duration=1, gpus=1) for i in range(10))
    assert [j.id for j in trace.window(jobs, *trace.parse_window("3:4"))] == ["3", "4", "5", "6"]
    assert len(trace.window(jobs, *trace.parse_window("8:"))) == 2
    for bad in ("3", "a:b", "1:0", "-1:2"):
        with pytest.raises(ValueError):
            trace.parse_window(bad)


def test_nodes_for_load() -> None:
    # 10 jobs x 1 GPU x 100 s over a 100 s span: mean demand 10 GPUs.
    jobs = [TraceJob(id=str(i), submit=i * 100 / 9, duration=90, gpus=1) for i in range(10)]
    assert trace.mean_demand(jobs) == pytest.approx(9.0)
    assert trace.nodes_for_load(jobs, 1.0, 4) == 3  # 9 / 12 <= 1, 9 / 8 > 1
    assert trace.nodes_for_load(jobs, 0.5, 4) == 5
    wide = [*jobs, TraceJob(id="w", submit=50, duration=1, gpus=32)]
    assert trace.nodes_for_load(wide, 1.0, 4) == 8  # room for the 32-GPU job


def test_overlay_repeats_with_unique_ids() -> None:
    a = [TraceJob(id="a", submit=100, duration=1, gpus=1, deadline=150)]
    b = [TraceJob(id="b", submit=7, duration=1, gpus=1), TraceJob(id="c", submit=9, duration=1,
                                                                  gpus=1)]
    out = trace.overlay([a, b], repeat=2)
    assert [(j.id, j.submit) for j in out] == [
        ("a#0", 0), ("b#0", 0), ("c#0", 2), ("a#1", 3), ("b#1", 3), ("c#1", 5)]
    assert out[3].deadline == 53
    assert len(trace.overlay([a, b], repeat=5, limit=4)) == 4

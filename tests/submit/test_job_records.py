"""The record parser used by the sbatch-identity tests, on output recorded from the cluster."""

from __future__ import annotations

from pathlib import Path

from job_records import differences, normalise, parse_records, replace_job_id

FIXTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
           / "scontrol-show-job-dd-22.05.txt")


def test_parse_and_normalise_a_recorded_record() -> None:
    (record,) = parse_records(FIXTURE.read_text())
    assert record["JobId"] == "273" and record["ArrayTaskId"] == "0-2"
    assert record["Comment"] == "user words  {rl1:d=1924992000,c=critical}"
    assert record["Command"] == "/tmp/rec.sh a b c"
    assert record["Dependency"] == "afterok:9(unfulfilled)"
    assert record["AllocNode:Sid"] == "localhost:6563"
    assert record["TRES"] == "cpu=1,mem=16000M,node=1,billing=1"
    assert record["Power"] == ""
    norm = normalise(record, "273")
    assert "JobId" not in norm and "SubmitTime" not in norm
    assert norm["StdOut"] == "/tmp/out-<id>_4294967294.txt"
    assert norm["Comment"] == "user words "
    assert differences(norm, {**norm, "Nice": "5"}) == {"Nice": ("0", "5")}


def test_job_id_replaced_only_as_a_whole_number() -> None:
    """CI once failed when job 429's id matched inside the array task id 4294967294."""
    assert replace_job_id("/w/slurm-429_4294967294.out", "429") == "/w/slurm-<id>_4294967294.out"
    assert replace_job_id("/w/slurm-4290.out 1429", "429") == "/w/slurm-4290.out 1429"
    assert replace_job_id("429", "429") == "<id>"


def test_job_id_replaced_in_the_file_name_only() -> None:
    """CI once ran job 438 with its output under pytest's /tmp/pytest-of-root/pytest-438/."""
    rec = {"StdOut": "/tmp/pytest-438/t/out-438.txt", "StdErr": "/tmp/pytest-438/t/err-438.txt"}
    norm = normalise(rec, "438")
    assert norm["StdOut"] == "/tmp/pytest-438/t/out-<id>.txt"
    assert norm["StdErr"] == "/tmp/pytest-438/t/err-<id>.txt"

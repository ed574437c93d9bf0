"""A new user following the docs: outputs go to a new folder, never over the shipped files;
a trace read with the wrong --format is told which format it looks like.

Each test runs the installed command in a subprocess in a temporary folder, as a person would,
and checks that the output holds no traceback, that an error is one line naming what is wrong
(exit status 2 for a usage error), and that no tracked file changed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DATA = REPO / "slurm_rl" / "data"
SHIPPED_PROFILE = [DATA / "inference" / "cpu_device.json", DATA / "inference" / "cpu_times.csv",
                   *sorted((DATA / "inference" / "profiles").glob("*.json"))]
SHIPPED_SWEEP = [REPO / "docs" / "inference" / n
                 for n in ("sweep.csv", "dp.csv", "sweep.png", "summary.md")]
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="slurm-rl inference needs torch (the [rl] extra)")


def run(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "slurm-rl"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text
    return [line for line in text.splitlines() if line.startswith("Error:")]


def snapshot(paths: list[Path]) -> dict[Path, tuple[int, bytes]]:
    """Each file's mtime (ns) and bytes: a rewrite with the same bytes still shows."""
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in paths}


# --- outputs: a new folder in the current directory --------------------------------------------

@needs_torch
def test_inference_profile_writes_a_new_folder_not_the_shipped_files(tmp_path: Path) -> None:
    before = snapshot(SHIPPED_PROFILE)
    proc = run("inference", "profile", "--reps", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert error_lines(proc) == []
    out = tmp_path / "inference-profile"
    for name in ("cpu_device.json", "cpu_times.csv", "profiles/vgg.json", "profiles/gpt.json"):
        assert (out / name).stat().st_size > 0, name
    assert f"wrote {Path('inference-profile') / 'profiles'}" in proc.stdout

    # A second run keeps the first one's output and says where it wrote instead.
    first = snapshot(sorted(p for p in out.rglob("*") if p.is_file()))
    proc = run("inference", "profile", "--no-time", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "inference-profile holds earlier output: writing to inference-profile-2" in proc.stderr
    assert (tmp_path / "inference-profile-2" / "profiles" / "resnet.json").is_file()
    assert snapshot(list(first)) == first
    assert snapshot(SHIPPED_PROFILE) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inference-profile",
                                                          "inference-profile-2"]


@needs_torch
def test_inference_evaluate_writes_a_new_folder_not_the_shipped_sweep(tmp_path: Path) -> None:
    before = snapshot(SHIPPED_SWEEP)
    proc = run("inference", "evaluate", "--seeds", "1", "--tasks", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "inference-eval"
    assert sorted(p.name for p in out.iterdir()) == ["dp.csv", "summary.md", "sweep.csv",
                                                     "sweep.png"]
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert proc.stdout.rstrip().endswith("inference-eval/summary.md")

    # --report-only redraws from the folder it defaults to, where the sweep just went.
    proc = run("inference", "evaluate", "--report-only", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(SHIPPED_SWEEP) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inference-eval"]


@needs_torch
def test_inference_report_only_without_a_sweep_is_one_line(tmp_path: Path) -> None:
    proc = run("inference", "evaluate", "--report-only", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    [line] = error_lines(proc)
    assert "--out-dir" in line and "no sweep.csv in inference-eval" in line
    assert list(tmp_path.iterdir()) == []


@needs_torch
def test_inference_help_names_the_default_folders(tmp_path: Path) -> None:
    for command, folder in (("profile", "./inference-profile/"), ("train", "./inference-train/"),
                            ("evaluate", "./inference-eval/")):
        proc = run("inference", command, "--help", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert folder in " ".join(proc.stdout.split()), (command, proc.stdout)


# --- a trace read with the wrong --format --------------------------------------------------------

def _own_swf(tmp_path: Path) -> Path:
    """A user's own SWF file: rows of the shipped one without its `;` header."""
    rows = [line for line in (DATA / "traces" / "itp-cluster01.swf").read_text().splitlines()
            if line.strip() and not line.startswith(";")][:40]
    path = tmp_path / "mine.swf"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("fmt", ["itp", "itp-deadline", "philly"])
def test_shipped_swf_read_as_csv_says_use_format_swf(tmp_path: Path, fmt: str) -> None:
    proc = run("simulate", "--trace", "data:itp-cluster01.swf", "--format", fmt, "--policy",
               "fifo", "--load", "0.8", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    [line] = error_lines(proc)
    assert "'--format'" in line and "looks like an SWF trace" in line
    assert f"not {fmt}: use --format swf" in line
    assert list(tmp_path.iterdir()) == []


def test_own_swf_file_with_the_default_format_says_use_format_swf(tmp_path: Path) -> None:
    swf = _own_swf(tmp_path)
    proc = run("simulate", "--trace", str(swf), "--format", "itp-deadline", "--policy", "fifo",
               "--load", "0.8", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    [line] = error_lines(proc)
    assert "mine.swf looks like an SWF trace" in line and "use --format swf" in line
    # gittins-table build reads itp-deadline unless told otherwise.
    proc = run("gittins-table", "build", "--traces", str(swf), "--out",
               str(tmp_path / "table.csv"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    [line] = error_lines(proc)
    assert "not itp-deadline: use --format swf" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.swf"]


def test_csv_read_as_swf_names_its_format(tmp_path: Path) -> None:
    proc = run("simulate", "--trace", "data:itp-deadline-cluster10.csv", "--format", "swf",
               "--policy", "fifo", "--load", "0.8", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    [line] = error_lines(proc)
    assert "looks like an ITP trace with deadlines, not swf: use --format itp-deadline" in line


def test_a_malformed_trace_of_the_right_format_keeps_its_own_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submission_time,duration,num_gpu\na,0,-5,1\n")
    proc = run("simulate", "--trace", str(bad), "--format", "itp", "--policy", "fifo",
               "--load", "0.8", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    [line] = error_lines(proc)
    assert "bad.csv:2: column duration (3): negative duration" in line
    assert "--format" not in line


def test_sniff_tells_the_formats_apart(tmp_path: Path) -> None:
    from slurm_rl.sim.trace import TraceFormat, sniff

    traces = DATA / "traces"
    assert sniff(traces / "itp-cluster01.swf") is TraceFormat.SWF
    assert sniff(_own_swf(tmp_path)) is TraceFormat.SWF
    assert sniff(traces / "itp-deadline-cluster10.csv") is TraceFormat.ITP_DEADLINE
    cases = {"itp.csv": "job_id,submission_time,duration,num_gpu\n",
             "philly.csv": "jobid,submitted_time,duration,num_gpus\n",
             "other.csv": "a,b,c\n"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    assert sniff(tmp_path / "itp.csv") is TraceFormat.ITP
    assert sniff(tmp_path / "philly.csv") is TraceFormat.PHILLY
    assert sniff(tmp_path / "other.csv") is None

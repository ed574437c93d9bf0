"""The pipelined example job (examples/inference/pipeline.sbatch) end to end on the test
cluster: the agent's plan splits MobileNet over two nodes (memory forces it), two Slurm tasks
run the stages with torch.distributed/gloo, and the measured latency is printed next to the
plan's prediction, with the breakdown table (--breakdown) of where the time goes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LINE = re.compile(r"pipeline mobilenet: 2 stages on tasks \[0, 1\] of 2; measured mean "
                  r"([\d.]+) ms, median [\d.]+ ms over 10 requests; predicted ([\d.]+) ms "
                  r"\+ completion message ([\d.]+) ms = ([\d.]+) ms; measured/predicted "
                  r"[\d.]+; all layers on one task, no transfer: ([\d.]+) ms")
ROW = re.compile(r"^\| ([^|]+?) \| ([\d.]+|n/a) \| ([\d.]*|n/a) \| ([\d.]*|n/a) \| ([\d.]*) \|$",
                 re.M)


def _run_job(tmp_path: Path) -> str:
    out = tmp_path / "pipe.out"
    env = {**os.environ, "SLURM_RL_BIN": str(BIN / "slurm-rl"),
           "SLURM_RL_PYTHON": sys.executable}
    sub = subprocess.run(["sbatch", "--parsable", "-N", "2", "-J",
                          f"rlinf-{uuid.uuid4().hex[:10]}", "-o", str(out),
                          str(REPO / "examples/inference/pipeline.sbatch"), "mobilenet", "10",
                          "--breakdown"],
                         capture_output=True, text=True, env=env, cwd=REPO, check=False)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if not subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True,
                                  check=False).stdout.strip():
                break
            time.sleep(1)
        else:
            pytest.fail(f"job {job} did not finish in 300 s")
    finally:
        subprocess.run(["scancel", job], capture_output=True, check=False)
    return out.read_text()


@pytest.mark.slurm
def test_pipelined_example_job(tmp_path: Path) -> None:
    text = _run_job(tmp_path)
    print(text)
    plan = json.loads(text.splitlines()[0])
    assert [s["node"] for s in plan["stages"]] == plan["nodes"]  # split over both nodes
    m = LINE.search(text)
    assert m, text
    measured, predicted, completion, pred_total, local = (float(g) for g in m.groups())
    assert predicted == pytest.approx(plan["predicted_latency_s"] * 1e3, abs=0.01) and local > 0
    assert completion > 0 and completion == pytest.approx(plan["link_latency_s"] * 1e3,
                                                          abs=0.01)
    rows = {r[0].split(",")[0].split(" (")[0]: r for r in ROW.findall(text)}
    parts = ["stage 0 compute", "hop 0->1", "stage 1 compute", "completion message 1->0"]
    assert set(parts) < set(rows), text

    def ms(part: str, col: int) -> float:
        return float(rows[part][col])

    # the plan's parts add up to its prediction: stage compute, the hop, the completion message
    assert sum(ms(p, 4) for p in parts) == pytest.approx(pred_total, abs=0.03)
    assert ms("hop 0->1", 4) == pytest.approx(  # link latency + 100 kB at the file's rate
        plan["link_latency_s"] * 1e3 + 100352 / (16e9 / 8) * 1e3, abs=0.01)
    # the measured parts account for the measured latency: what no part covers (Python
    # between the parts, clock skew between the tasks; on a busy host also a task preempted
    # there) is a small remainder
    rest = ms("rest: Python between parts", 1)
    assert sum(ms(p, 1) for p in parts) + rest == pytest.approx(measured, abs=0.05)
    assert abs(rest) < 0.1 * measured, text
    assert all(ms(p, 1) > 0 for p in parts)
    for p in ("stage 0 compute", "stage 1 compute"):  # CPU time <= wall time
        assert ms(p, 3) <= ms(p, 1) + 0.05
    assert "torch threads 1" in text  # each task runs one thread, as the calibration did
    # The prediction is for an idle host (the per-layer CPU times measured at calibration,
    # the gloo hop measured by benchmarks/bench_inference.py --gloo). The requests during which
    # no thread of either task waited (more than 0.5 ms in all) for a core ran as on an idle
    # host; when there are at least 3, they are compared with the prediction. On this VM the
    # compute alone runs 0.99-1.36x its calibrated time from one quiet run to the next
    # (docs/inference.md), so the bound is checked with the stages' compute taken at its
    # measured CPU time: the rest of the prediction (hops, completion message, Python between
    # them) must hold within 25 %. The plain ratio is printed. On a busy host (other jobs on
    # the same cores) every part is slower, the run-queue delay row says by how much the
    # threads waited, and only the breakdown above is checked.
    calm = next(r for r in rows.values() if r[0].startswith("uncontended requests"))
    count = int(re.search(r": (\d+) of 10", calm[0]).group(1))  # type: ignore[union-attr]
    if count >= 3:
        mean, cpu = float(calm[1]), float(calm[3])
        calibrated = ms("stage 0 compute", 4) + ms("stage 1 compute", 4)
        adjusted = mean - (cpu - calibrated)
        print(f"{count} uncontended requests: mean {mean} ms, predicted {pred_total} ms "
              f"(ratio {mean / pred_total:.3f}); their compute {cpu} ms CPU against "
              f"{calibrated:.2f} ms calibrated; with the compute as measured "
              f"{adjusted:.2f} ms (ratio {adjusted / pred_total:.3f})")
        assert abs(adjusted / pred_total - 1) <= 0.25, text
    else:
        print(f"busy host: {count} of 10 requests uncontended (run-queue delay "
              f"{ms('waiting for a core: run-queue delay', 1)} ms per request); measured "
              f"{measured} ms, predicted {pred_total} ms; the 25 % bound is not checked")

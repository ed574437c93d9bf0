"""Records the squeue/sinfo fixtures in tests/fixtures/slurm from the real test cluster.

    SLURM_CONF=/var/tmp/slurm-rl-cluster/etc/slurm.conf PYTHONPATH=. \
        .venv/bin/python tests/slurm/poll_recording.py

Submits a few honest jobs of every kind the parser must know (completed, running, cancelled,
held multi-node, --gpus, array, an rlsbatch intent with progress, running on two nodes) and the
hostile ones (control characters, U+2028, U+0085 in comments; newline, U+001F, byte
0xFF in names), polls them with the fixed marks below, writes the output, and cancels every job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from slurm_rl.slurm.framing import Framing
from slurm_rl.slurm.parse import SINFO_FIELDS, SQUEUE_FIELDS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RECORDED = Framing(field_mark="\x1fF0123456789abcdef", record_mark="\x1fR0123456789abcdef")
"""The marks the fixtures were recorded with (a real poll draws fresh ones)."""
LEGACY = Framing(field_mark="\x1f", record_mark="\x1f")
"""The naive format (U+001F after every field) reads as both marks being U+001F."""

# Comments and names of jobs that would stop every cycle of a line-based poller.
HOSTILE_COMMENTS = {
    "c-nl": "a\nb {rl1:c=critical}", "c-cr": "a\rb", "c-vt": "a\vb", "c-ff": "a\fb",
    "c-rs": "a\x1eb\x1cc\x1dd", "c-u2028": "a\u2028b", "c-u0085": "a\u0085b",
    "c-us": "a\x1fb\x1f\x1f",
}
HOSTILE_NAMES = {"n-nl": b"n-nl\nx", "n-us": b"n-us\x1fx", "n-ff": b"n-ff\xffx"}


def sbatch(*args: str | bytes) -> str:
    out = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", *args],
                         capture_output=True, check=True)
    return out.stdout.decode().strip().split(";")[0]


def record() -> None:
    tag = f"rec{os.getpid()}"
    ids: list[str] = []
    try:
        ids.append(sbatch("-J", f"{tag}-done", "--gres=gpu:1", "--wrap", "true"))
        ids.append(sbatch("-J", f"{tag}-run", "--gres=gpu:1", "-t", "5", "--wrap", "sleep 60"))
        ids.append(sbatch("-H", "-J", f"{tag} b|x", "-N", "2", "--gres=gpu:4", "-t",
                          "1-00:00:00", "--wrap", "true"))
        ids.append(sbatch("-H", "-J", f"{tag}-gpus", "--gpus=3", "--wrap", "true"))
        ids.append(sbatch("-H", "-J", f"{tag}-array", "--array=0-2", "--wrap", "true"))
        ids.append(cancelled := sbatch("-H", "-J", f"{tag}-cancel", "--wrap", "true"))
        ids.append(sbatch(
            "-H", "-J", f"{tag}-prog", "--gres=gpu:1", "-t", "2-03:05:00", "--comment",
            "user said {hi} {rl1:d=1795999999,c=critical,g=1-4,e,s=1000,m=resnet50,b=128}"
            "{rlp:100/1000@2.5;t=1795985300}", "--wrap", "true"))
        # running on two nodes: GPUs per node (--gres) and per job (--gpus)
        ids.append(sbatch("-J", f"{tag}-two", "-N", "2", "--gres=gpu:2", "-t", "5",
                          "--wrap", "sleep 60"))
        ids.append(sbatch("-J", f"{tag}-two-gpus", "-N", "2", "--gpus=3", "-t", "5",
                          "--wrap", "sleep 60"))
        honest = ids[:]
        hostile = [sbatch("-H", "-J", f"{tag}-honest", "--gres=gpu:1", "--wrap", "true")]
        for name, comment in HOSTILE_COMMENTS.items():
            hostile.append(sbatch("-H", "-J", f"{tag}-{name}", f"--comment={comment}",
                                  "--wrap", "true"))
        for name_bytes in HOSTILE_NAMES.values():
            hostile.append(sbatch("-H", "-J", tag.encode() + b"-" + name_bytes, "--wrap", "true"))
        ids += hostile
        subprocess.run(["scancel", cancelled], check=True)
        time.sleep(4)  # the first job completes, the second starts
        env = {k: v for k, v in os.environ.items() if not k.startswith("SQUEUE_")} | {
            "SLURM_TIME_FORMAT": "standard",
            "SQUEUE_FORMAT2": RECORDED.format_option(SQUEUE_FIELDS)}
        for path, job_ids in (("squeue-22.05.txt", honest), ("squeue-hostile-22.05.txt", hostile)):
            # bytes: the fixture keeps what is not UTF-8 as Slurm printed it
            out = subprocess.run(["squeue", "-h", "-a", "-t", "all", "-j", ",".join(job_ids)],
                                 capture_output=True, check=True, env=env).stdout
            (FIXTURES / path).write_bytes(out)
        sinfo = subprocess.run(["sinfo", "-h", "-N", "-O", RECORDED.format_option(SINFO_FIELDS)],
                               capture_output=True, check=True).stdout
        (FIXTURES / "sinfo-marks-22.05.txt").write_bytes(sinfo)
    finally:
        subprocess.run(["scancel", *ids], check=False)


if __name__ == "__main__":
    if "SLURM_CONF" not in os.environ:
        sys.exit("set SLURM_CONF to the test cluster's slurm.conf")
    record()

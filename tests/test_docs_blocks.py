"""Docs that are tests: every shell block in README.md and docs/*.md is run here, run
with smaller inputs ("shortened"), or skipped with the reason printed (a site's example, a
transcript of output, a run of many minutes covered elsewhere).

Blocks are found by their fence (```sh, ```bash, ```shell, ```console, or an unlabelled block
whose lines look like commands) and named by file and first command line. A block that is not
in BLOCKS fails `test_every_block_is_classified`: a new doc block must say what it is. The
summary line (blocks run, shortened, skipped) is printed by that test.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SHELL = {"sh", "bash", "shell", "console"}
COMMANDS = re.compile(r"^\s*(\$ |slurm-rl |rlsbatch |\.venv/|make |python|SLURM_CONF=)", re.M)


@dataclass(frozen=True)
class Block:
    doc: str
    first: str
    """The first line that is not a comment: the block's name."""
    text: str


@dataclass(frozen=True, kw_only=True)
class How:
    skip: str = ""
    """Why the block is not run (empty: it is run)."""
    shorten: str = ""
    """Why it is run with changed input (replace, keep_lines say how)."""
    replace: tuple[tuple[str, str], ...] = ()
    keep_lines: tuple[int, ...] = field(default_factory=tuple)
    """Run only these lines of the block (0-based; continuation lines follow their first)."""
    expect: str = ""
    """Text the output must contain."""


SITE = "a site's example (systemd, /etc, /opt or the controller's slurm.conf)"
TRANSCRIPT = "a transcript of output, not commands to run"
BLOCKS: dict[tuple[str, str], How] = {
    ("README.md", "make demo    # installs what it needs, starts a 4-node test cluster, runs a "
                  "small mixed workload"):
        How(skip="the whole set-up; CI runs make test, and the demo's hint and Quick look are "
                 "tests/test_first_hour_cluster.py"),
    ("README.md", "source .venv/bin/activate"):
        How(skip="run by tests/test_first_hour_cluster.py (its own job name and database)"),
    ("docs/admin.md", "make install                  # /opt/slurm-rl, with rlsbatch and "
                      "slurm-rl linked into /usr/local/bin"):
        How(skip="installs into /opt, /usr/local/bin and /etc (tests/install/"
                 "test_make_install.py runs make install into a temporary PREFIX and BINDIR)"),
    ("docs/admin.md", "install -m 644 docs/slurm-rl-agent.service "
                      "/etc/systemd/system/slurm-rl-agent.service"): How(skip=SITE),
    ("docs/admin.md", "[daemon]"): How(skip=SITE),
    ("docs/admin.md", "systemd-analyze verify slurm-rl.service slurm-rl-agent.service   "
                      "# no findings (with ExecStart present)"): How(skip=SITE),
    ("docs/admin.md", "systemctl stop slurm-rl"): How(skip=SITE),
    ("docs/admin.md", "slurm-rl admin job-submit-lua --config /etc/slurm-rl/slurm-rl.toml "
                      "--operator slurm \\"): How(skip=SITE),
    ("docs/admin.md", 'sacctmgr -i add account research Description="..." '
                      'Organization="..."'):
        How(skip=SITE + "; the test cluster's own: docker/config/accounts.sacctmgr, "
                        "tests/cluster_users.py"),
    ("docs/admin.md", "runuser -u nobody -- sbatch --test-only --comment='{rl1:c=critical}' "
                      "--wrap true   # must be refused"):
        How(skip="run as written, with its refusal checked, by tests/test_first_hour_cluster.py"
                 " (the test cluster loads job_submit.lua)"),
    ("docs/admin.md", "$ sbatch --comment='{rl1:d=1796160636,c=critical}' job.sh"):
        How(skip=TRANSCRIPT),
    ("docs/admin.md", ".venv/bin/slurm-rl admin job-submit-lua --config "
                      "docker/config/slurm-rl-trust.toml \\"):
        How(shorten="written to a temporary file (not over the tracked one) and compared",
            replace=(("-o docker/config/job_submit.lua", "-o \"$TMP/job_submit.lua\" && "
                      "cmp \"$TMP/job_submit.lua\" docker/config/job_submit.lua && "
                      "echo same-as-shipped"),),
            expect="same-as-shipped"),
    ("docs/daemon.md", "mkdir -p /etc/slurm-rl /var/lib/slurm-rl"): How(skip=SITE),
    ("docs/daemon.md", "$ slurm-rl explain 56 --db /var/lib/slurm-rl/slurm-rl.db"):
        How(skip=TRANSCRIPT),
    ("docs/daemon.md", "$ slurm-rl status --db /var/lib/slurm-rl/slurm-rl.db"):
        How(skip=TRANSCRIPT),
    ("docs/daemon.md", "$ slurm-rl replay --db r.db --since 1h --policy sjf --plot replay.png"):
        How(skip=TRANSCRIPT),
    ("docs/daemon.md", "$ .venv/bin/python benchmarks/bench_prediction.py"):
        How(skip=TRANSCRIPT),
    ("docs/daemon.md", "$ SLURM_CONF=/var/tmp/slurm-rl-cluster/etc/slurm.conf \\"):
        How(skip=TRANSCRIPT),
    ("docs/daemon.md", "slurm-rl agent --once          # sample, write, exit"):
        How(shorten="without `slurm-rl agent` (it runs until stopped); no NVML here, so the "
                    "agent says so and writes nothing", keep_lines=(0, 2),
            expect="slurm-rl agent:"),
    ("docs/evaluation.md", ".venv/bin/slurm-rl evaluate --scenarios docs/eval/rigid.toml "
                           "--workers 2   # 4-9 min on 2 cores"):
        How(skip="4-9 minutes; evaluate on a small scenario file is "
                 "tests/test_first_hour_errors.py and tests/sim/test_sim_cli.py"),
    ("docs/evaluation.md", ".venv/bin/slurm-rl evaluate --scenarios docs/eval/elastic.toml "
                           "--workers 1   # 24 min on one core"):
        How(skip="24 minutes of simulation (120 runs)"),
    ("docs/evaluation.md", ".venv/bin/slurm-rl evaluate --scenarios "
                           "docs/eval/elastic-rules.toml --workers 2   # about 10 min"):
        How(skip="about 10 minutes (14 CPU-minutes of simulation); the rules are "
                 "tests/sim/test_restart_rules.py"),
    ("docs/evaluation.md", ".venv/bin/slurm-rl evaluate --scenarios docs/eval/seeds.toml "
                           "--workers 1   # 12 min on one core"):
        How(skip="12 minutes of simulation (144 runs)"),
    ("docs/evaluation.md", "sed '/^restart_grace_s = 0.0/d; /^requeue_s = 0.0/d' "
                           "docs/eval/rl.toml > /tmp/rl-steps.toml"):
        How(skip="13 minutes of simulation (192 runs); the restart steps are "
                 "tests/sim/test_restart_steps.py"),
    ("docs/evaluation.md", "sed '/^restart_grace_s = 0.0/d; /^requeue_s = 0.0/d; /^policies = /{N;"
                           "s/.*/policies = [\"edf-elastic\", \"deadline\", \"elasticflow\", "
                           "\"elasticflow-drop\"]/}' \\"):
        How(skip="88 minutes of simulation (48 runs); the restart steps are "
                 "tests/sim/test_restart_steps.py"),
    ("docs/evaluation.md", "for x in 0.0 0.25 0.5 1.0; do"):
        How(skip="5 minutes of simulation (80 runs); the opt-in share and the rules are "
                 "tests/sim/test_restart_rules.py"),
    ("docs/evaluation.md", ".venv/bin/python benchmarks/live_deadlines.py --out "
                           "docs/eval/live/live-deadlines.json"):
        How(skip="15 minutes on the test cluster; its helpers are "
                 "tests/benchmarks/test_live_deadlines_parse.py"),
    ("docs/inference.md", ".venv/bin/slurm-rl inference profile            "
                          "# profiles + CPU times into ./inference-profile/ (~5 s)"):
        How(skip="writes ./inference-profile/ where it runs; tests/test_first_hour_outputs.py "
                 "runs it in a temporary folder and checks the shipped files stay as they are"),
    ("docs/inference.md", ".venv/bin/python benchmarks/inference_place_guard.py        "
                          "# 30 s of CPU"):
        How(shorten="on 20 settings and the default checkpoint (the figures need all 300)",
            replace=(("# 30 s of CPU", "--cells 20 --checkpoint "
                                       "slurm_rl/data/inference/drm-dql-s1.pt"),),
            expect="guard acted in"),
    ("docs/inference.md", ".venv/bin/slurm-rl inference place resnet --cluster "
                          "examples/inference/cluster.toml"):
        How(expect="# resnet by drm-dql (guarded): predicted latency 1.306 ms"),
    ("docs/inference.md", 'sbatch -N 2 --wrap "slurm-rl plan mobilenet --device-type t4 '
                          '--bandwidth-gbps 100 --json"'):
        How(skip="submits a job; tests/inference/test_inference_slurm_plan.py runs it"),
    ("docs/inference.md", 'rlsbatch --rl-inference mobilenet -N 2 -o plan.out --wrap '
                          '"slurm-rl plan --json"'):
        How(skip="submits a job; tests/inference/test_inference_slurm_plan.py runs it"),
    ("docs/inference.md", '$ rlsbatch --rl-inference alexnet -N 2 --wrap "slurm-rl plan --json"'):
        How(skip="a transcript of refusals; tests/submit/test_rlsbatch_bad_input.py runs them"),
    ("docs/inference.md", "SLURM_RL_BIN=$PWD/.venv/bin/slurm-rl SLURM_RL_PYTHON=$PWD/.venv/bin/"
                          "python \\"):
        How(skip="submits a job; tests/inference/test_inference_pipeline_slurm.py runs it"),
    ("docs/inference.md", ".venv/bin/slurm-rl inference evaluate --grid "
                          "docs/inference/grid-example.toml --out-dir /tmp/grid-eval"):
        How(replace=(("/tmp/grid-eval", "$TMP/grid-eval"),),
            expect="- drm-dql: worst 1.268 (cluster example, bandwidths from bandwidth.csv, "
                   "mobilenet, load 0.8); geo-mean 0.974;"),
    ("docs/inference.md", "D=slurm_rl/data/inference C=docs/inference    "
                          "# the shipped checkpoints and profiles; tables and plots"):
        How(skip="runs of many minutes that rewrite shipped files (test_inference_cli.py "
                 "runs profile and train on small inputs; evaluate's sweep is not run in tests)"),
    ("docs/inference.md", 'P="--param demonstrator=best --param single_model=0.5 '
                          '--param demo_episodes=16"'):
        How(skip="six training runs and a 45-cell sweep, an hour of CPU (test_inference_cli.py "
                 "checks the demonstrator setting's errors)"),
    ("docs/inference-rounds.md", 'P="--param demonstrator=best --param single_model=0.5 '
                                 '--param demo_episodes=16"'):
        How(skip="training runs of both agents and 45-cell sweeps at two loads, an hour of CPU "
                 "or more (test_inference_cli.py checks the demonstrator setting's errors)"),
    ("docs/inference-rounds.md", 'N="--param demo_episodes=0 --param eps_start=1.0 '
                                 '--param learning_rate=0.001"'):
        How(skip="six training runs and two 45-cell sweeps, 30 minutes of CPU "
                 "(tests/inference/test_inference_candidates.py checks the candidates option)"),
    ("docs/inference-rounds.md",
     "export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1"):
        How(skip="four training runs and four 45-cell proxy sweeps, 25 minutes of CPU "
                 "(tests/benchmarks/test_inference_round6.py checks the script's pure parts)"),
    ("docs/policies.md", "for c in 09 10 02 04; do for load in 0.8 1.0; do"):
        How(shorten="one trace, one load, 100 jobs (the full loop takes many minutes)",
            replace=(("for c in 09 10 02 04", "for c in 10"), ("0.8 1.0", "0.8"),
                     ("--window 0:2000", "--window 0:100")),
            expect='"policy": "srtf2d-oracle"'),
    ("docs/reliability.md", ".venv/bin/python benchmarks/bench_retention.py --seconds 120 "
                            "--retention-s 20"): How(skip="a 2-minute benchmark"),
    ("docs/reliability.md", ".venv/bin/python benchmarks/bench_retention.py --seconds 360"):
        How(skip="a 6-minute benchmark"),
    ("docs/reliability.md", "SLURM_CONF=/var/tmp/slurm-rl-cluster/etc/slurm.conf \\"):
        How(skip="a 2-minute benchmark on the cluster"),
    ("docs/rlsbatch.md", "rlsbatch --rl-deadline +6h --rl-class critical --rl-gpus 2-8 -J train "
                         "-t 8:00:00 train.sh --lr 3e-4"):
        How(skip="train.sh is the user's own training script"),
    ("docs/rlsbatch.md", "#SBATCH -J resnet -t 4:00:00 --comment=\"ablation 3\""):
        How(skip="a job script (its #RLSBATCH lines are tests/submit)"),
    ("docs/rlsbatch.md", "$ rlsbatch --dry-run --rl-deadline +6h --rl-gpus 6-8 -J x job.sh"):
        How(skip=TRANSCRIPT),
    ("docs/rlsbatch.md", "$ rlsbatch --hold --rl-deadline +6h --rl-hard --gres=gpu:1 -t 60 "
                         "train.sh"): How(skip=TRANSCRIPT),
    ("docs/rlsbatch.md", "#RLSBATCH --rl-elastic --rl-gpus 1-4 --rl-deadline +12h"):
        How(skip="a job script (tests/daemon/test_resize_slurm.py runs one like it)"),
    ("docs/rlsbatch.md", "slurm-rl progress 1200 --total 10000 [--rate 3.5] [--job ID] "
                         "[--interval 30] [--force]"):
        How(skip="a synopsis ([...] options; run inside a job)"),
    ("docs/sim-to-real.md", "make cluster && eval \"$(docker/cluster env)\""):
        How(skip="a replay takes minutes and raises slurmctld's debug level on the shared "
                 "cluster (the --resim block below runs)"),
    ("docs/sim-to-real.md", ".venv/bin/python benchmarks/sim_to_real.py --resim "
                            "docs/sim-to-real/replay-4.json --no-slurm-timing"):
        How(expect="| fifo | 50 |"),
    ("docs/sim-to-real.md", ".venv/bin/python benchmarks/sim_to_real.py --policies "
                            "rl,deadline,elasticflow --elastic-every 2 \\"):
        How(skip="three replays of minutes on the cluster (the --resim block below runs)"),
    ("docs/sim-to-real.md", ".venv/bin/python benchmarks/sim_to_real.py --resim "
                            "docs/sim-to-real/elastic-7.json \\"):
        How(expect="| rl | 50 | 0.997 |"),
    ("docs/sim-to-real.md", "SLURM_CONF=... .venv/bin/python benchmarks/calibrate_restart.py "
                            "-n 5 --grace-s 10 --size-mb 1 \\"):
        How(skip="minutes of restarts on the cluster (tests/benchmarks/test_calibrate_restart.py "
                 "runs one)"),
    ("docs/sim-to-real.md", "slurm-rl simulate --trace data:itp-deadline-cluster02.csv "
                            "--format itp-deadline --window 0:2000 \\"):
        How(expect="policy rl on data:itp-deadline-cluster02.csv: 2000 jobs"),
    ("docs/simulator.md", "slurm-rl simulate --trace data:itp-deadline-cluster10.csv "
                          "--format itp-deadline \\"):
        How(expect="policy tiresias on data:itp-cluster01.swf: 500 jobs"),
    ("docs/simulator.md", "slurm-rl evaluate --scenarios docs/eval/rigid.toml --workers 2 "
                          "--out /tmp/eval-rigid   # 4-9 min"):
        How(skip="4-9 minutes (evaluate on a small scenario file: "
                 "tests/test_first_hour_errors.py)"),
    ("docs/simulator.md", ".venv/bin/python benchmarks/bench_sim.py           "
                          "# every registered non-oracle policy"):
        How(skip="benchmarks of minutes; they print figures, they are not tests"),
    ("docs/simulator.md", "for load in 0.8 1.0 1.5; do for seed in 0 1 2; do"):
        How(skip="108 simulations, about 4 minutes: the figures of the table above it (the "
                 "models themselves: tests/sim/test_time_limit_models.py)"),
}


def find_blocks() -> list[Block]:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found = []
    for path in docs:
        for match in FENCE.finditer(path.read_text()):
            lang, text = match.group(1), match.group(2)
            if lang not in SHELL and not (lang == "" and COMMANDS.search(text)):
                continue
            lines = [ln for ln in text.splitlines() if ln.strip() and (
                not ln.startswith("#") or ln.startswith(("#SBATCH", "#RLSBATCH")))]
            found.append(Block(doc=str(path.relative_to(REPO)),
                               first=lines[0] if lines else "", text=text))
    return found


BLOCKS_FOUND = find_blocks()


def test_every_block_is_classified(capsys: pytest.CaptureFixture[str]) -> None:
    unknown = [(b.doc, b.first) for b in BLOCKS_FOUND if (b.doc, b.first) not in BLOCKS]
    assert not unknown, f"doc blocks not in tests/test_docs_blocks.py BLOCKS: {unknown}"
    gone = sorted(set(BLOCKS) - {(b.doc, b.first) for b in BLOCKS_FOUND})
    assert not gone, f"BLOCKS names blocks no doc has any more: {gone}"
    hows = [BLOCKS[(b.doc, b.first)] for b in BLOCKS_FOUND]
    ran = sum(1 for h in hows if not h.skip and not h.shorten)
    short = sum(1 for h in hows if h.shorten)
    skipped = sum(1 for h in hows if h.skip)
    with capsys.disabled():  # printed even under -q: the reasons are in the skip summary
        print(f"\ndocs blocks: {len(hows)} in README.md and docs/*.md: {ran} run as written, "
              f"{short} shortened, {skipped} skipped with a reason")
    assert ran + short + skipped == len(hows)


def lines_of(text: str, keep: tuple[int, ...]) -> str:
    """The commands at line indexes `keep`, each with its continuation lines."""
    raw = text.splitlines()
    out: list[str] = []
    for i in keep:
        j = i
        out.append(raw[j])
        while raw[j].rstrip().endswith("\\"):
            j += 1
            out.append(raw[j])
    return "\n".join(out) + "\n"


@pytest.mark.slurm
@pytest.mark.parametrize("block", BLOCKS_FOUND, ids=lambda b: f"{b.doc}:{b.first[:40]}")
def test_doc_block(block: Block, tmp_path: Path) -> None:
    how = BLOCKS.get((block.doc, block.first))
    if how is None:
        pytest.fail("not classified: see test_every_block_is_classified")
    if how.skip:
        pytest.skip(f"{block.doc}: {how.skip}")
    script = lines_of(block.text, how.keep_lines) if how.keep_lines else block.text
    for old, new in how.replace:
        assert old in script, f"{old!r} is no longer in the block"
        script = script.replace(old, new)
    env = {**os.environ, "TMP": str(tmp_path),
           "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out
    assert how.expect in out, out

"""slurm-rl's job_submit.lua, enforced by slurmctld itself on the real test cluster.

Everything here runs as unprivileged Unix users (created if absent, with their Slurm
associations: tests/cluster_users.py): `slurmrl-u1`, granted nothing but the account
rl-critical, `slurmrl-crit`, granted "critical" by docker/config/slurm-rl-trust.toml,
`slurmrl-qos`, whose association allows the QOS critical that the same file grants, and
`slurmrl-noassoc`, with no association at all. They use plain `sbatch` and `scontrol update`,
as a hostile user would. The table tests use
`sbatch --test-only`, which runs the plugin but creates no job; the others submit held jobs and
cancel them at the end.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_users import ensure_users

from slurm_rl.submit.cli import make_submission
from slurm_rl.submit.intent import decode_comment
from slurm_rl.submit.tags import MAX_INT, encode_intent_values

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
PLAIN, GRANTED = "slurmrl-u1", "slurmrl-crit"
QOS_USER, NO_ASSOC = "slurmrl-qos", "slurmrl-noassoc"
TRUST = REPO / "docker" / "config" / "slurm-rl-trust.toml"
NOW = int(time.time())
SOON = NOW + 86400
HORIZON_S = 90 * 86400  # the test grants keep the default trust.deadline_horizon_s
DENIED = "Batch job submission failed: Access/permission denied"
NOT_GRANTED = ("slurm-rl: the class 'critical' (c=critical) is not granted to user slurmrl-u1, "
               "account (default) or QOS (default); ask your Slurm administrator, or submit "
               "without it")
FIXED = "Access/permission denied for job"


@pytest.fixture(scope="module")
def users() -> None:
    if os.geteuid() != 0:
        pytest.fail("tests of job_submit.lua run as root (they submit as other users)")
    # PLAIN may submit under the account rl-critical, which [trust] grants "critical";
    # QOS_USER's association allows the QOS critical, which [trust] grants it too.
    ensure_users(PLAIN, accounts=("rl", "rl-critical"))
    ensure_users(GRANTED)
    ensure_users(QOS_USER, qos=("critical",))
    ensure_users(NO_ASSOC, associate=False)


@pytest.fixture(scope="module")
def gate(users: None, slurm_cluster: dict[str, str],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A world-writable working directory; checks that the cluster runs our plugin; cancels
    the jobs the tests made."""
    conf = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                          check=True).stdout
    assert any(line.split("=")[0].strip() == "JobSubmitPlugins" and "lua" in line
               for line in conf.splitlines()), "test cluster runs without job_submit/lua: " \
        "restart it with docker/cluster up"
    running = (Path(slurm_cluster["SLURM_RL_CLUSTER_DIR"]) / "etc" / "job_submit.lua").read_text()
    assert running == (REPO / "docker" / "config" / "job_submit.lua").read_text(), \
        "the cluster runs an old job_submit.lua: restart it with docker/cluster up"
    work = tmp_path_factory.mktemp("lua-gate")
    work.chmod(0o1777)
    yield work
    if _made:
        subprocess.run(["scancel", *_made], capture_output=True)


_made: list[str] = []


def run_as(user: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = ["env", f"SLURM_CONF={os.environ['SLURM_CONF']}"]
    return subprocess.run(["runuser", "-u", user, "--", *env, *argv], cwd=cwd,
                          capture_output=True, text=True, errors="replace", timeout=60)


def submit(user: str, gate: Path, *options: str, test_only: bool = False
           ) -> subprocess.CompletedProcess[str]:
    mode = ["--test-only"] if test_only else ["-H", "--parsable"]
    proc = run_as(user, ["sbatch", *mode, "-o", "/dev/null", "-J", "rl-lua-gate", *options,
                         "--wrap", "sleep 30"], gate)
    if proc.returncode == 0 and not test_only:
        _made.append(proc.stdout.strip().split(";")[0])
    return proc


def comment_of(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-O", "Comment:\x1f"], capture_output=True,
                         text=True, check=True).stdout
    return out.rstrip("\n").removesuffix("\x1f")


def jobs_of(user: str) -> set[str]:
    out = subprocess.run(["squeue", "-h", "-u", user, "-o", "%i"], capture_output=True,
                         text=True, check=True).stdout
    return set(out.split())


# --- the table: comments slurmctld accepts or refuses from a plain user ---------------------
FULL = encode_intent_values(deadline=SOON, hard=True, gpus_min=1, gpus_max=4, elastic=True,
                            total_steps=1000, model="resnet50", batch_size=128,
                            inference="mobilenet")
ACCEPTED = [
    "{rl1:}", "hello {rl1:}", "  mine   {rl1:c=standard}", f"x {FULL}",
    "x {rl1:c=besteffort}", "x {rl1:c=standard}", "x {rl1:g=-4}", "x {rl1:g=2-}",
    "x {rl1:g=4096-4096}", "x {rl1:g=1-1}",
    f"x {{rl1:s={MAX_INT}}}", "x {rl1:s=0000000000000001}", "x {rl1:b=1}",
    "x {rl1:m=a.b_c-D9}", "x {rl1:m=" + "m" * 40 + "}", "x {rl1:i=mobilenet}",
    "x {rl1:i=" + "i" * 40 + "}", "x {rl1:m=bert,i=gpt}", f"x {{rl1:d={NOW + HORIZON_S - 60}}}",
    "x {rl1:d=946684800}", "user said {hi} {rl1:g=1-4}", "x {rl1:h,e}",
    "x {rl1:g=1-2}{rlp:0}", f"{{rlp:5/10@1.5;t={NOW}}}", "unmanaged {rlp:10/10@1e+05}",
    f"x {{rl1:}}{{rlp:5/10;t={NOW}.5}}", f"x {{rl1:}}{{rlp:5;t={NOW}.125}}",
    "x {rl1:}{rlp:3@0.0001234}", "x {rl1:}{rlp:0/1@0}", f"x {{rl1:}}{{rlp:{MAX_INT}}}",
    "not ours {rl2:c=critical}", "x {RL1:c=critical}", "{rl1 c=critical}", "caf\udce9 {rl1:}",
    "a" * 990 + " {rl1:}",
]
REFUSED = [
    # class not granted (every spelling the decoder reads as "critical")
    ("x {rl1:c=critical}", NOT_GRANTED), (f"x {{rl1:d={SOON},c=critical}}{{rlp:1/2}}", NOT_GRANTED),
    ("x {rl1:h,c=critical,g=1-4}", NOT_GRANTED),
    # classes: only the three exact names (the decoder takes no other spelling either)
    *[(f"x {{rl1:c={c}}}", "unknown class")
      for c in ("CRITICAL", "cri-tical", "Crit_ical", " critical", "critical ", "\uff43ritical",
                "vip", "", "best-effort", "BestEffort", "standard\u200b")],
    # GPU ranges: ASCII digits only, 1..4096, min <= max
    *[(f"x {{rl1:g={g}}}", "a GPU range is min-max in ASCII digits, 1..4096, min <= max")
      for g in ("\u0663-\u0664", "\uff11-\uff12", "\u00b2", "2", "0-2", "4-2", "1-4097", "-", "",
                "1-2-3", "1--2", " 1-2", "1e3", "99999999999999999999-1")],
    # whole numbers
    *[(f"x {{rl1:{k}={v}}}", "must be a whole number 1..9007199254740991 in ASCII digits")
      for k in ("s", "b")
      for v in ("99999999999999999999999999", "9007199254740992", "0", "-1", "1e3",
                "\u0661\u0660", "", " 5", "5 ", "0x10", "12345678901234567")],
    # deadlines
    (f"x {{rl1:d={NOW + HORIZON_S + 86400}}}", "is more than 90 days ahead"),
    *[(f"x {{rl1:d={d}}}", "the deadline must be epoch seconds in ASCII digits")
      for d in ("99999999999", "100", "-5", "1.5e9", "", "\u0661\u0667\u0660\u0660\u0660"
                "\u0660\u0660\u0660\u0660\u0660")],
    # model names, flags, keys
    *[(f"x {{rl1:{k}={m}}}", "a model name is 1-40 letters")
      for k in ("m", "i")
      for m in ("", "a b", "m" * 41, "r\u00e9sum\u00e9", "x;y", "a/b.json", "../etc/passwd")],
    ("x {rl1:i=gpt,i=bert}", "given twice"), ("x {rl1:i}", "unknown key"),
    ("x {rl1:h=1}", "a flag takes no value"), ("x {rl1:e=}", "a flag takes no value"),
    ("x {rl1:zz=1}", "unknown key"), ("x {rl1:q}", "unknown key"),
    ("x {rl1:c=standard,c=critical}", "given twice"), ("x {rl1:g=1-2,g=3-4}", "given twice"),
    # placement: once, at the end, after a space
    *[(c, "may appear once, at the end of the comment")
      for c in ("{rl1:c=standard} {rl1:c=critical}", "x{rl1:}", "{rl1:} trailing",
                "x {rl1:} ", "x {rl1:c=critical", "x {rlp:1/2} {rl1:}", "{rl1:{c=critical}}",
                "x {rl1:}{rlp:1}{rlp:2}", "{rlp:1} {rlp:2}", "x {rl1:}{rl1:}")],
    # progress
    *[(f"x {{rl1:}}{{rlp:{p}}}", "progress tag")
      for p in ("", "5/3", "5@nan", "5@inf", "5@-1", "5@1e999", "\u0665", "5;t=4102444801",
                "5;junk", "5/0", "99999999999999999", "5/", "5@", "-1", "5@1_0", "5@0x1p3",
                f"5;t={NOW};t={NOW}", f"5;t={NOW}.", f"5;t={NOW}.1234", "5;t=.5",
                "5;t=1e9", f"5;t={NOW}.-1", "5;t=4102444800.5")],
    # sizes
    ("x {rl1:d=1700000000000000}", "the deadline must be epoch seconds"),
    ("x " + encode_intent_values(deadline=SOON, hard=True, service_class="besteffort",
                                 gpus_min=4096, gpus_max=4096, elastic=True,
                                 total_steps=MAX_INT, model="m" * 40, batch_size=MAX_INT)
     + "{rlp:9007199254740991/9007199254740991@1.00000000000000000000000000000;t=4000000000}",
     "the slurm-rl tags take"),
    ("a" * 1000 + " {rl1:}", "a comment with a slurm-rl tag may take at most 1000 bytes"),
]


@pytest.mark.parametrize("comment", ACCEPTED)
def test_plain_user_may_submit_a_valid_tag(gate: Path, comment: str) -> None:
    proc = submit(PLAIN, gate, f"--comment={comment}", test_only=True)
    assert proc.returncode == 0, proc.stderr
    # The gate is never looser than the daemon's decoder: what it lets through decodes.
    decoded = decode_comment(comment)
    if "{rl1:" in comment:
        assert decoded.intent is not None
    if "{rlp:" in comment:
        assert decoded.progress is not None


@pytest.mark.parametrize(("comment", "message"), REFUSED)
def test_plain_user_is_refused_a_bad_tag(gate: Path, comment: str, message: str) -> None:
    proc = submit(PLAIN, gate, f"--comment={comment}", test_only=True)
    assert proc.returncode != 0
    first = proc.stderr.splitlines()[0]
    assert first.startswith("sbatch: error: slurm-rl: ") and message in first, proc.stderr


MUTANT_CHARS = ("0", "9", "1", "-", ",", "=", "{", "}", ":", ";", "/", "@", " ", "c", "e", "h",
                "\n", "\x1f", "\u0663", "\uff11", "\u00b2", "\u2028", "\udcff", "rl1:", "rlp:",
                "critical", "99999999999999999")


def mutants(count: int, seed: int = 8) -> list[str]:
    """Comments near valid tags: 1-3 random replacements, insertions or deletions each."""
    rng = random.Random(seed)
    bases = [f"x {{rl1:d={SOON},h,c=besteffort,g=1-4,e,s=1000,m=resnet50,b=128}}"
             f"{{rlp:5/10@1.5;t={NOW}}}", "{rl1:c=critical,g=2-8}{rlp:1/2}"]
    out = []
    for _ in range(count):
        text = rng.choice(bases)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text))
            op = rng.randrange(3)
            new = rng.choice(MUTANT_CHARS) if op < 2 else ""
            text = text[:at] + new + text[at + (op != 1):]
        out.append(text)
    return out


def test_mutated_tags_never_buy_critical(gate: Path) -> None:
    """300 comments near valid tags, from a plain user: each is refused with our message, or
    accepted and then decodes (the gate is never looser than the decoder) to a class other
    than "critical"."""
    verdicts = {"accepted": 0, "refused": 0}
    for comment in mutants(300):
        proc = submit(PLAIN, gate, f"--comment={comment}", test_only=True)
        decoded = decode_comment(comment)
        if proc.returncode == 0:
            verdicts["accepted"] += 1
            assert decoded.intent is not None or "{rl1:" not in comment, comment
            assert decoded.progress is not None or "{rlp:" not in comment, comment
            assert decoded.intent is None or decoded.intent.service_class.value != "critical"
        else:
            verdicts["refused"] += 1
            assert proc.stderr.startswith("sbatch: error: slurm-rl: "), (comment, proc.stderr)
    print(verdicts)
    assert verdicts["accepted"] > 10 and verdicts["refused"] > 100, verdicts


@pytest.mark.parametrize("comment", [
    f"x {{rl1:d={SOON},c=critical}}", "x {rl1:g=\u0663-\u0664}",
    "x {rl1:s=99999999999999999999999999}", f"x {{rl1:d={NOW + 99999999999}}}",
])
def test_refused_job_never_exists(gate: Path, comment: str) -> None:
    """A real submission (not --test-only): sbatch fails with our message and slurmctld holds
    no job for it."""
    before = jobs_of(PLAIN)
    proc = submit(PLAIN, gate, f"--comment={comment}")
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("sbatch: error: slurm-rl: ")
    assert lines[-1].startswith("sbatch: error: Batch job submission failed: ")
    assert jobs_of(PLAIN) == before


def test_forged_critical_message_is_exact(gate: Path) -> None:
    proc = submit(PLAIN, gate, f"--comment={{rl1:d={SOON},c=critical}}")
    assert proc.stderr.splitlines() == [f"sbatch: error: {NOT_GRANTED}", f"sbatch: error: {DENIED}"]


def test_granted_user_and_account_may_claim_critical(gate: Path) -> None:
    comment = f"mine {{rl1:d={SOON},c=critical}}"
    ok = submit(GRANTED, gate, f"--comment={comment}")
    assert ok.returncode == 0, ok.stderr
    assert comment_of(_made[-1]) == comment
    # The account grant (slurmctld enforces accounts only with AccountingStorageEnforce;
    # this cluster has no slurmdbd, so any user may name it: see docs/admin.md).
    by_account = submit(PLAIN, gate, "-A", "rl-critical", f"--comment={comment}")
    assert by_account.returncode == 0, by_account.stderr
    other = submit(PLAIN, gate, "-A", "somebody-else", f"--comment={comment}", test_only=True)
    assert other.returncode != 0 and "account somebody-else" in other.stderr


def test_tag_added_or_changed_later_is_refused(gate: Path) -> None:
    plain = submit(PLAIN, gate, "--comment=just words")
    assert plain.returncode == 0, plain.stderr
    job = _made[-1]
    for forged in (f"just words {{rl1:d={SOON},c=critical}}", "just words {rl1:}",
                   "{rl1:c=besteffort}"):
        proc = run_as(PLAIN, ["scontrol", "update", f"JobId={job}", f"Comment={forged}"], gate)
        assert proc.returncode == 1 and f"{FIXED} {job}" in proc.stderr
        assert comment_of(job) == "just words"
    tagged = submit(PLAIN, gate, "--comment=words {rl1:c=besteffort}")
    job = _made[-1]
    for changed in ("words {rl1:c=critical}", "words {rl1:c=standard}", "words", "",
                    "words {rl1:c=besteffort,g=1-4}", "words {rlp:1/2}"):
        proc = run_as(PLAIN, ["scontrol", "update", f"JobId={job}", f"Comment={changed}"], gate)
        assert proc.returncode == 1 and f"{FIXED} {job}" in proc.stderr, (changed, proc.stderr)
        assert comment_of(job) == "words {rl1:c=besteffort}"
    assert tagged.returncode == 0


def test_owner_may_report_progress_but_not_bad_progress(gate: Path) -> None:
    from slurm_rl.core import Progress
    from slurm_rl.submit.intent import with_progress

    comment = f"train {{rl1:d={SOON},g=1-2,s=1000}}"
    assert submit(PLAIN, gate, f"--comment={comment}").returncode == 0
    job = _made[-1]
    # exactly what `slurm-rl progress 250 --total 1000 --rate 2.5` in the job sends
    report = with_progress(comment, Progress(steps_done=250, steps_total=1000, rate=2.5,
                                             updated_at=float(NOW)))
    proc = run_as(PLAIN, ["scontrol", "update", f"JobId={job}", f"Comment={report}"], gate)
    assert proc.returncode == 0, proc.stderr
    assert comment_of(job) == report
    # the user's own words may change too, the intent staying as it was
    renamed = report.replace("train ", "training run ")
    proc = run_as(PLAIN, ["scontrol", "update", f"JobId={job}", f"Comment={renamed}"], gate)
    assert proc.returncode == 0 and comment_of(job) == renamed
    for bad in ("2000/1000", "5@nan", "\u0665/1000", "5;t=99999999999"):
        forged = renamed[: renamed.index("{rlp:")] + "{rlp:" + bad + "}"
        proc = run_as(PLAIN, ["scontrol", "update", f"JobId={job}", f"Comment={forged}"], gate)
        assert proc.returncode == 1 and f"Unspecified error for job {job}" in proc.stderr
        assert comment_of(job) == renamed


def test_progress_report_may_respell_the_intent(gate: Path) -> None:
    """`slurm-rl progress` rewrites the intent the way rlsbatch's encoder spells it; the gate
    compares meanings, so a hand-written tag in another order or spelling still takes reports."""
    from slurm_rl.core import Progress
    from slurm_rl.submit.intent import with_progress

    comment = "mine {rl1:s=0000000000000100,g=1-4,c=standard,e}"
    assert submit(PLAIN, gate, f"--comment={comment}").returncode == 0
    job = _made[-1]
    report = with_progress(comment, Progress(steps_done=10, steps_total=100))
    assert report == "mine {rl1:g=1-4,e,s=100}{rlp:10/100}"
    proc = run_as(PLAIN, ["scontrol", "update", f"JobId={job}", f"Comment={report}"], gate)
    assert proc.returncode == 0, proc.stderr
    assert comment_of(job) == report
    for changed in ("mine {rl1:g=1-4,e,s=101}", "mine {rl1:g=1-4,s=100}",
                    "mine {rl1:g=1-4,e,s=100,c=besteffort}"):
        proc = run_as(PLAIN, ["scontrol", "update", f"JobId={job}", f"Comment={changed}"], gate)
        assert proc.returncode == 1 and f"{FIXED} {job}" in proc.stderr


def test_operator_may_change_the_tag(gate: Path) -> None:
    assert submit(PLAIN, gate, "--comment=w {rl1:}").returncode == 0
    job = _made[-1]
    granted = f"w {{rl1:d={SOON},c=critical}}"
    proc = subprocess.run(["scontrol", "update", f"JobId={job}", f"Comment={granted}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert comment_of(job) == granted


@pytest.mark.parametrize(("user", "flags", "refused"), [
    (PLAIN, ["--rl-deadline=+1d", "--rl-gpus=1-2", "--rl-steps=1000", "--rl-model=gpt2"], None),
    (PLAIN, ["--rl-class=besteffort", "--rl-elastic", "--rl-batch-size=64"], None),
    (PLAIN, ["--rl-inference=mobilenet", "--rl-model=mobilenet"], None),
    (PLAIN, ["--rl-class=critical"], NOT_GRANTED),
    (PLAIN, ["--rl-deadline=+1d", "--rl-model=gpt2"], None),  # deadline only: held, g=1-M
    (GRANTED, ["--rl-class=critical", "--rl-deadline=+2h", "--rl-hard", "-c1"], None),
])
def test_rlsbatch_commands_pass_the_gate(gate: Path, user: str, flags: list[str],
                                         refused: str | None) -> None:
    """The sbatch command rlsbatch builds (its own planning, run here as root), run as the
    user: rlsbatch's tags are what the gate lets through, and nothing more."""
    plan = make_submission([*flags, "-H", "--parsable", "-o", "/dev/null", "-J", "rl-lua-gate",
                      "--wrap", "sleep 30"], os.environ, lambda: b"")
    proc = run_as(user, plan.argv, gate)
    if refused is None:
        assert proc.returncode == 0, proc.stderr
        job = proc.stdout.strip().split(";")[0]
        _made.append(job)
        assert comment_of(job) == plan.comment
    else:
        assert proc.returncode == 1
        assert proc.stderr.splitlines()[0] == f"sbatch: error: {refused}"


# --- the QOS grant: [trust] critical_qos, checked by slurmctld against the association ------
INVALID_QOS = "sbatch: error: Batch job submission failed: Invalid qos specification"


def qos_of(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%q"], capture_output=True,
                          text=True, check=True).stdout.strip()


def test_the_qos_grant_holds_only_where_the_association_allows_the_qos(gate: Path) -> None:
    """The plugin lets a critical job under the QOS critical through; slurmctld then runs it
    under that QOS only for a user whose association allows it, and refuses everyone else."""
    comment = "--comment={rl1:c=critical}"
    ok = submit(QOS_USER, gate, "--qos=critical", comment)
    assert ok.returncode == 0, ok.stderr
    assert qos_of(ok.stdout.strip().split(";")[0]) == "critical"
    before = jobs_of(PLAIN)
    refused = submit(PLAIN, gate, "--qos=critical", comment)
    assert refused.returncode == 1 and refused.stderr.splitlines()[0] == INVALID_QOS, refused
    assert jobs_of(PLAIN) == before
    # Without the QOS the plugin refuses the class itself, as for any ungranted user.
    assert submit(QOS_USER, gate, comment).stderr.splitlines()[0].startswith(
        "sbatch: error: slurm-rl: the class 'critical' (c=critical) is not granted to user "
        "slurmrl-qos")


def test_a_user_without_an_association_can_not_submit_at_all(gate: Path) -> None:
    proc = submit(NO_ASSOC, gate)
    assert proc.returncode == 1
    assert "Invalid account or account/partition combination" in proc.stderr, proc.stderr
    assert jobs_of(NO_ASSOC) == set()


RLSBATCH_ARGS = ["--rl-class=critical", "-H", "--parsable", "-o", "/dev/null", "-J",
                 "rl-lua-gate", "--wrap", "sleep 30"]


def test_rlsbatch_asks_for_the_qos_the_association_allows(gate: Path) -> None:
    """rlsbatch reads the submitter's association (sacctmgr) and adds --qos=critical; the job
    passes the gate and runs under that QOS."""
    env = {**os.environ, "SLURM_RL_CONFIG": str(TRUST)}
    plan = make_submission(RLSBATCH_ARGS, env, lambda: b"", submitter=QOS_USER)
    assert "--qos=critical" in plan.argv and plan.warnings == ()
    proc = run_as(QOS_USER, plan.argv, gate)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    _made.append(job)
    assert qos_of(job) == "critical" and comment_of(job) == plan.comment


@pytest.mark.parametrize(("user", "where"), [(PLAIN, "account rl"),
                                             (NO_ASSOC, "no association at all")])
def test_rlsbatch_refuses_critical_without_the_qos_in_one_line(gate: Path, user: str,
                                                               where: str) -> None:
    from slurm_rl.submit.errors import UsageError

    env = {**os.environ, "SLURM_RL_CONFIG": str(TRUST)}
    with pytest.raises(UsageError) as refused:
        make_submission(RLSBATCH_ARGS, env, lambda: b"", submitter=user)
    assert refused.value.message == (
        f"--rl-class critical: not granted to user {user}: [trust] in {TRUST} grants it with "
        f"the QOS critical, which {user}'s Slurm association ({where}) does not allow; ask "
        f"your Slurm administrator (sacctmgr modify user {user} set qos+=critical), or "
        "submit without --rl-class critical")


def test_rlsbatch_says_the_refusal_in_one_line_and_submits_nothing(gate: Path) -> None:
    """The command itself, run by root, whose association (account root) has no QOS
    critical."""
    import sys

    rlsbatch = str(Path(sys.executable).with_name("rlsbatch"))
    before = jobs_of("root")
    proc = subprocess.run([rlsbatch, *RLSBATCH_ARGS], capture_output=True, text=True,
                          cwd=gate, env={**os.environ, "SLURM_RL_CONFIG": str(TRUST)})
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith("rlsbatch: error: --rl-class critical: not granted to user root: ")
    assert "(account root) does not allow" in line
    assert jobs_of("root") == before

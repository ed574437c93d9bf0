"""`rlsbatch`: sbatch, plus a QoS intent (deadline, class, GPU range) carried in the comment.

The command line is split the way sbatch's getopt_long splits it (cmdline.py); rlsbatch's
`--rl-*` flags come out, every other word stays as given and in place. The script's #SBATCH
lines are read for the user's comment and GPU request, its #RLSBATCH lines for our flags
(script.py). rlsbatch then *becomes* sbatch (exec) with one `--comment=<user comment> <tag>`
added just before the script (the last --comment wins, on the command line over #SBATCH), plus
`--gres`/`--nodes` when a GPU range has to be turned into a first request (gpus.py). So sbatch's
output, errors and exit status are sbatch's own, and a script read from stdin is handed to it on
stdin. Heterogeneous jobs (`:` or `#SBATCH hetjob`) and command lines sbatch will refuse are
handed over untouched.

Not click: rlsbatch must accept sbatch's grammar (bundled short options, abbreviations, options
up to the script), and everything on this path is kept import-free for start-up time (see
docs/rlsbatch.md, "Speed").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

from slurm_rl.submit.cmdline import Opt, Scan, scan_command_line
from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.rlflags import HELP, IntentValues, build_intent
from slurm_rl.submit.script import Directives, read_directives
from slurm_rl.submit.tags import PROGRESS_RESERVE_BYTES, CommentError, join_comment

SBATCH = "sbatch"


class Submission:
    """The sbatch call rlsbatch will make: exec `argv` (feeding `stdin` if set), or only show
    it (--rl-dry-run). Not a dataclass: rlsbatch imports nothing it can avoid (start-up)."""

    __slots__ = ("argv", "stdin", "intent", "comment", "dry_run", "show_help", "script_name",
                 "force", "gpus", "time_limit", "sized", "warnings")

    def __init__(self, argv: list[str], *, stdin: bytes | None = None,
                 intent: IntentValues | None = None, comment: str | None = None,
                 dry_run: bool = False, show_help: bool = False, script_name: str = "",
                 force: bool = False, gpus: int = 0, time_limit: str | None = None,
                 sized: int = 0, warnings: tuple[str, ...] = ()) -> None:
        self.argv = argv
        self.stdin = stdin
        self.intent = intent
        """None when the job is handed to sbatch untouched (not managed by slurm-rl)."""
        self.comment = comment
        self.dry_run = dry_run
        self.show_help = show_help
        self.script_name = script_name
        self.force = force
        """--rl-force: submit even if a hard deadline looks infeasible (feedback.py)."""
        self.gpus = gpus
        """The GPUs the job starts with (only worked out for a job with a deadline)."""
        self.time_limit = time_limit
        """Its -t/--time value, if any (same)."""
        self.sized = sized
        """Deadline only (deadline_only.py): submitted held for the daemon to size, with this
        many GPUs at most; 0 otherwise."""
        self.warnings = warnings
        """Printed to stderr before the job is submitted (it still is)."""


def make_submission(args: list[str], env: Mapping[str, str], read_stdin: Callable[[], bytes],
                    query: Callable[[], dict[str, tuple[bool, int, int]]] | None = None,
                    now: float | None = None, submitter: str | None = None,
                    assoc: Callable[[str], str | None] | None = None) -> Submission:
    """Everything short of running sbatch: raises UsageError for bad input. SUBMITTER is the
    user name (default: whoever runs this), ASSOC reads a user's Slurm associations (default:
    sacctmgr; grants.py)."""
    scan = scan_command_line(args)
    names = {o.name for o in scan.rl}
    dry_run = bool(names & {"rl-dry-run", "dry-run"})
    force = bool(names & {"rl-force", "force"})
    if "rl-help" in names:
        return Submission([], show_help=True)
    rl_given = bool(names - {"rl-dry-run", "dry-run", "rl-force", "force"})
    sb_names = {o.name for o in scan.sbatch}
    if scan.error is not None or sb_names & {"help", "usage", "version"}:
        # sbatch prints its complaint (or its help) and exits before reading any script.
        return Submission([SBATCH, *scan.kept, *scan.rest], dry_run=dry_run,
                    show_help="help" in sb_names and scan.error is None)
    if scan.hetjob:
        if rl_given:
            raise UsageError("heterogeneous jobs (':' between components) are handed to sbatch "
                             "untouched; --rl-* flags can't be used with them")
        return Submission([SBATCH, *scan.kept, *scan.rest], dry_run=dry_run)

    stdin, directives, script_name = _read_script(scan, read_stdin)
    if directives.hetjob:
        if rl_given or directives.rl.rl:
            raise UsageError(f"{script_name}: heterogeneous jobs (#SBATCH hetjob) are handed to "
                             "sbatch untouched; --rl-* flags can't be used with them")
        return Submission([SBATCH, *scan.kept, *scan.rest], stdin=stdin, dry_run=dry_run,
                    script_name=script_name)

    flags = [(o.name, o.value, o.where) for o in directives.rl.rl + scan.rl]
    intent = build_intent(flags, now)
    added: list[str] = []
    sized = 0
    if intent.gpus_min is not None and intent.gpus_max is not None:
        from slurm_rl.submit.gpus import plan_gpus  # only GPU ranges pay for the sinfo call

        added = plan_gpus(intent.gpus_min, intent.gpus_max, scan.sbatch, env,
                          directives.sbatch.sbatch, query or _sinfo_query)
    elif intent.deadline is not None:
        from slurm_rl.submit import deadline_only

        if deadline_only.applies(True, False, intent.inference is not None, scan.sbatch, env,
                                 directives.sbatch.sbatch):
            if intent.model is None:
                raise UsageError(deadline_only.NO_MODEL)
            intent.gpus_min, intent.gpus_max = deadline_only.gpu_range(
                scan.sbatch, env, directives.sbatch.sbatch, query or _sinfo_query)
            sized = intent.gpus_max
            added = ["--hold"]  # released by the daemon once sized (daemon/sizing.py)
    if intent.elastic:
        _check_requeueable(scan, env, directives)
    warnings: tuple[str, ...] = ()
    if intent.service_class == "critical":
        from slurm_rl.submit import grants
        from slurm_rl.submit.gpus import effective

        def given(name: str, var: str) -> str | None:
            opt = effective(name, scan.sbatch, env, directives.sbatch.sbatch, var)
            return opt.value if opt else None

        try:
            options, warning = grants.critical_options(
                account=given("account", "SBATCH_ACCOUNT"), qos=given("qos", "SBATCH_QOS"),
                partition=given("partition", "SBATCH_PARTITION"), env=env, user=submitter,
                assoc=assoc or grants.sacctmgr_user_assoc)
        except grants.NotGranted as exc:
            raise UsageError(str(exc)) from None
        added += options
        warnings = (warning,) if warning else ()

    user = scan.last("comment") or directives.sbatch.last("comment")
    try:
        comment = join_comment((user.value or "") if user else "", intent.tag(),
                               reserve_bytes=PROGRESS_RESERVE_BYTES)
    except CommentError as exc:
        raise UsageError(str(exc)) from None
    argv = [SBATCH, *scan.kept, *added, f"--comment={comment}", *scan.rest]
    gpus, limit = 0, None
    if intent.deadline is not None:  # for the feedback at submission (feedback.py)
        from slurm_rl.submit.feedback import start_gpus
        from slurm_rl.submit.gpus import effective

        gpus = start_gpus(scan.sbatch, env, directives.sbatch.sbatch, added)
        said = effective("time", scan.sbatch, env, directives.sbatch.sbatch, "SBATCH_TIMELIMIT")
        limit = said.value if said else None
    return Submission(argv, stdin=stdin, intent=intent, comment=comment, dry_run=dry_run,
                      script_name=script_name, force=force, gpus=gpus, time_limit=limit,
                      sized=sized, warnings=warnings)


def _read_script(scan: Scan, read_stdin: Callable[[], bytes]
                 ) -> tuple[bytes | None, Directives, str]:
    """(bytes to hand sbatch on stdin, the script's directives, its name for messages)."""
    if scan.last("wrap") is not None:
        return None, read_directives("", "--wrap"), "--wrap"
    path = scan.script
    if path is None:
        data = read_stdin()
        return data, read_directives(data.decode("utf-8", "surrogateescape"), "stdin"), "stdin"
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise UsageError(f"{path}: can't read the job script: {exc.strerror or exc}") from None
    name = os.path.basename(path) or path
    return None, read_directives(data.decode("utf-8", "surrogateescape"), name), name


def _check_requeueable(scan: Scan, env: Mapping[str, str], directives: Directives) -> None:
    said: Opt | None = None
    for opt in reversed(scan.sbatch):
        if opt.name in ("requeue", "no-requeue"):
            said = opt
            break
    if said is None and "SBATCH_NO_REQUEUE" in env:
        said = Opt("no-requeue", None, "$SBATCH_NO_REQUEUE")
    if said is None:
        said = next((o for o in reversed(directives.sbatch.sbatch)
                     if o.name in ("requeue", "no-requeue")), None)
    if said is not None and said.name == "no-requeue":
        src = "" if said.where == "command line" else f" ({said.where})"
        raise UsageError(f"--rl-elastic: an elastic job is resized by requeueing it, but it "
                         f"was given --no-requeue{src}")


def _sinfo_query() -> dict[str, tuple[bool, int, int]]:
    from slurm_rl.slurm.runner import SubprocessRunner
    from slurm_rl.submit.gpus import SINFO_ARGS, parse_sinfo

    result = SubprocessRunner(timeout_s=30).run(list(SINFO_ARGS))
    if not result.ok:
        last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise UsageError(f"--rl-gpus: could not ask sinfo for the partition's GPUs: {last}",
                         exit_code=1)
    return parse_sinfo(result.stdout)


def _read_stdin() -> bytes:
    return sys.stdin.buffer.read() if sys.stdin is not None else b""


def _feed_stdin(data: bytes) -> None:
    """Make `data` our standard input, for sbatch to read after exec."""
    try:
        fd = os.memfd_create("rlsbatch-script", 0)
    except (AttributeError, OSError):
        import tempfile

        fd = os.dup(tempfile.TemporaryFile().fileno())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.close(fd)


def _shell_underscore(program: str) -> None:
    """A shell sets $_ to the path of the command it runs, and sbatch hands the environment to
    the job: make it name sbatch, as if the user had typed sbatch."""
    said = os.environ.get("_")
    if not said or os.path.basename(said) != os.path.basename(sys.argv[0]):
        return
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(folder or ".", program)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            os.environ["_"] = path
            return


def _print_submission(sub: Submission) -> None:
    import shlex

    print("sbatch command:", shlex.join(sub.argv))
    if sub.stdin is not None:
        print(f"script: on stdin ({len(sub.stdin)} bytes)")
    if sub.intent is None or sub.comment is None:
        print("intent: none (handed to sbatch untouched; slurm-rl will not manage this job)")
        return
    from slurm_rl.submit.intent import decode_comment

    decoded = decode_comment(sub.comment)
    print("comment:", sub.comment)
    print("user comment:", repr(decoded.user_comment))
    print("intent:", decoded.intent)
    if sub.intent.deadline is not None:
        import time

        when = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(sub.intent.deadline))
        print(f"deadline: {when} (epoch {int(sub.intent.deadline)})")


def _feedback(sub: Submission) -> str | None:
    """Print the predicted start/finish (stderr: stdout is sbatch's); the refusal, if any."""
    import time

    from slurm_rl.submit.feedback import assess, parse_time_limit

    intent = sub.intent
    assert intent is not None and intent.deadline is not None
    if sub.sized:
        from slurm_rl.submit.deadline_only import feedback

        lines, refusal = feedback(
            deadline=intent.deadline, hard=intent.hard, max_gpus=sub.sized,
            time_limit_s=parse_time_limit(sub.time_limit), total_steps=intent.total_steps,
            model=intent.model, batch_size=intent.batch_size, now=time.time(), force=sub.force)
    else:
        lines, refusal = assess(
            deadline=intent.deadline, hard=intent.hard, gpus=sub.gpus,
            time_limit_s=parse_time_limit(sub.time_limit), total_steps=intent.total_steps,
            model=intent.model, batch_size=intent.batch_size, now=time.time(), force=sub.force)
    for line in lines:
        sys.stderr.write(line + "\n")
    return refusal


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        sub = make_submission(args, os.environ, _read_stdin)
    except UsageError as exc:
        sys.stderr.write(f"rlsbatch: error: {exc.message}\n")
        return exc.exit_code
    if not sub.argv:
        sys.stdout.write(HELP)
        return 0
    for warning in sub.warnings:
        sys.stderr.write(f"rlsbatch: warning: {warning}\n")
    if sub.intent is not None and sub.intent.deadline is not None:
        refusal = _feedback(sub)
        if refusal:
            sys.stderr.write(f"rlsbatch: error: {refusal}\n")
            return 2
    if sub.dry_run:
        _print_submission(sub)
        return 0
    if sub.show_help:
        import subprocess

        code = subprocess.run(sub.argv, check=False).returncode
        sys.stdout.write("\n" + HELP)
        return code
    if sub.stdin is not None:
        _feed_stdin(sub.stdin)
    _shell_underscore(sub.argv[0])
    sys.stdout.flush()
    try:
        os.execvp(sub.argv[0], sub.argv)
    except OSError as exc:
        sys.stderr.write(f"rlsbatch: error: can't run {sub.argv[0]}: {exc.strerror}\n")
        return 127
    return 0  # not reached: execvp does not return

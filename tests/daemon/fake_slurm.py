"""FAKES for unit tests of the daemon's restart sequences (resize.py, preempt.py): a recorded
stand-in for Slurm's commands."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_rl.slurm.runner import CommandResult


class FakeSlurm:
    """A FAKE for unit tests: records each command and answers like the 22.05 commands did on
    the test cluster (empty output on success; `squeue -o %T` prints the state, `squeue -O
    JobID,Requeue,BatchFlag` the requeue facts of `facts`)."""

    def __init__(self, states: Sequence[str] = ("PENDING",),
                 facts: dict[str, str] | None = None) -> None:
        self.calls: list[tuple[tuple[str, ...], str | None]] = []
        self.states = list(states)
        self.facts = facts if facts is not None else {}
        self.fail_on = ""

    def run(self, args: Sequence[str], *, timeout_s: float | None = None,
            input: str | None = None) -> CommandResult:
        argv = tuple(args)
        self.calls.append((argv, input))
        out = err = ""
        code = 0
        if argv[0] == "squeue" and "-O" in argv:
            ids = argv[argv.index("-j") + 1].split(",")
            out = "".join(f"{i:<24}{self.facts.get(i, '1       1')}\n" for i in ids)
        elif argv[0] == "squeue":
            state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            if argv[-1] == "%i %T":  # each job given, with its state (the same for all)
                ids = argv[argv.index("-j") + 1].split(",")
                out = "".join(f"{i} {state}\n" for i in ids)
            else:
                out = state + "\n"
        if self.fail_on and self.fail_on in " ".join(argv) + (input or ""):
            code, err = 1, "slurm_update error: Access/permission denied"
        return CommandResult(args=argv, returncode=code, stdout=out, stderr=err,
                             duration_s=0.0)

    def commands(self) -> list[str]:
        return [" ".join(a) if i is None else i.strip().replace("\n", " ; ")
                for a, i in self.calls if a[0] != "squeue"]

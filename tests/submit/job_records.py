"""`scontrol show job -dd` records, parsed and normalised for comparing two submissions."""

from __future__ import annotations

import re

from slurm_rl.submit.intent import decode_comment

# Keys whose value is the rest of the line (it may hold spaces); scontrol ends it with a space.
WHOLE_LINE = ("Comment=", "Command=", "WorkDir=", "StdErr=", "StdIn=", "StdOut=",
              "AdminComment=", "SystemComment=", "MailUser=", "SubmitLine=")
IGNORED = frozenset({"JobId", "ArrayJobId", "SubmitTime", "EligibleTime", "AccrueTime",
                     "StartTime", "EndTime", "LastSchedEval", "PreemptEligibleTime",
                     "PreemptTime", "SuspendTime", "RunTime", "HetJobId", "HetJobOffset",
                     "SLUID", "SubmitLine"})
"""Ids and times: these differ between any two submissions. Slurm 26.05 adds two: SLUID, a
unique id per submission, and SubmitLine, the command line that submitted the job; rlsbatch's
is by design not the user's (sbatch's, with the --rl-* flags taken out and slurm-rl's tag in
--comment), and what the command line asked for is compared field by field."""
JOB_ID_PATHS = ("StdErr", "StdIn", "StdOut")


def parse_records(text: str) -> list[dict[str, str]]:
    """One dict per job record (records are separated by blank lines)."""
    records: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.split("\n"):
        body = line.strip(" ")
        if not body:
            if current:
                records.append(current)
                current = {}
            continue
        whole = next((k for k in WHOLE_LINE if body.startswith(k)), None)
        if whole is not None:
            value = line.lstrip(" ")[len(whole):]
            current[whole[:-1]] = value[:-1] if value.endswith(" ") else value
            continue
        key = None
        for word in body.split(" "):
            if "=" in word and (key is None or not word.startswith("=")):
                key, _, value = word.partition("=")
                current[key] = value
            elif key is not None:
                current[key] += " " + word  # a value with a space in it
    if current:
        records.append(current)
    return records


def replace_job_id(text: str, job_id: str) -> str:
    """The job id written as <id> where it is a whole number: job 429 must not match inside an
    array's task id 4294967294 (CI failed on exactly that)."""
    return re.sub(rf"(?<!\d){re.escape(job_id)}(?!\d)", "<id>", text)


def normalise(record: dict[str, str], job_id: str) -> dict[str, str]:
    """Drop ids and times; write the job id in output file names as <id> (not in their folders:
    CI once ran job 438 under pytest's /tmp/pytest-of-root/pytest-438/); split the comment into the
    user's part (compared) and whether slurm-rl's intent is there (reported separately)."""
    out = {k: v for k, v in record.items() if k not in IGNORED}
    for key in JOB_ID_PATHS:
        if key in out:  # only in the file name (%j): a folder may hold the same digits
            folder, sep, name = out[key].rpartition("/")
            out[key] = folder + sep + replace_job_id(name, job_id)
    # no Comment line means no comment; a tagged comment without user text has an empty part
    out["Comment"] = decode_comment(out.get("Comment", "")).user_comment
    return out


def differences(a: dict[str, str], b: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}

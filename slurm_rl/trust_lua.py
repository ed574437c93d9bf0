"""The job_submit.lua that slurmctld runs at the gate, rendered from the site's [trust] grants.

    slurm-rl admin job-submit-lua --config /etc/slurm-rl/slurm-rl.toml -o /etc/slurm/job_submit.lua

The plugin (template `slurm_rl/data/job_submit.lua.in`) refuses, in slurmctld itself, a job whose
comment carries a malformed or out-of-bounds slurm-rl tag, a "critical" class the site did not
grant, or a later change of the intent by anyone but an operator (docs/admin.md). The grants are
baked in from the same config the daemon reads, so there is one source of truth; the bounds are
baked in from `slurm_rl.submit.tags`, so the plugin and the Python decoder agree. Standard
library and click only.
"""

from __future__ import annotations

import os
import pwd
import re
import tempfile
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path

import click

from slurm_rl.config import ConfigError, TrustConfig, load_config
from slurm_rl.submit import tags

TEMPLATE = "data/job_submit.lua.in"
MAX_MODEL_CHARS = 40
"""The longest model name (`tags.valid_model_name`; a test keeps the two equal)."""
MAX_UID = 2**32 - 2
"""uid_t's largest value that is not (uid_t)-1."""

_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")
_PLAIN = frozenset(range(0x20, 0x7F)) - {ord('"'), ord("\\")}


class RenderError(ValueError):
    """The grants can not be rendered; the message is one line naming the key or option."""


def lua_string(text: str) -> str:
    """`text` as a Lua 5.1 string literal: printable ASCII as is, every other byte as `\\ddd`."""
    data = text.encode("utf-8", "surrogateescape")
    return '"' + "".join(chr(b) if b in _PLAIN else f"\\{b:03d}" for b in data) + '"'


def lua_set(keys: Iterable[str | int]) -> str:
    """A Lua table used as a set: `{[k] = true, ...}` (sorted, so the output is stable)."""
    items = sorted(set(keys), key=lambda k: (isinstance(k, str), str(k)))
    body = ", ".join(
        f"[{lua_string(k) if isinstance(k, str) else int(k)}] = true" for k in items
    )
    return "{" + body + "}"


def horizon_text(seconds: int) -> str:
    """The deadline horizon as a user reads it in a refusal ("90 days")."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit[:-1] if count == 1 else unit}"
    return f"{seconds} seconds"


def _names(key: str, names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if not name or name != name.strip():
            raise RenderError(f"trust.{key}: {name!r} is not a name (empty or padded)")
    return names


def render_job_submit_lua(trust: TrustConfig, *, operator_uids: Iterable[int] = ()) -> str:
    """The job_submit.lua text for these grants. uid 0 is always an operator."""
    uids = {0, *operator_uids}
    for uid in uids:
        if isinstance(uid, bool) or not isinstance(uid, int) or not 0 <= uid <= MAX_UID:
            raise RenderError(f"--operator: {uid!r} is not a uid (0..{MAX_UID})")
    horizon = int(trust.deadline_horizon_s)
    if horizon < 1:
        raise RenderError(f"trust.deadline_horizon_s: must be >= 1 s (got {horizon})")
    users = _names("critical_users", trust.critical_users)
    accounts = _names("critical_accounts", trust.critical_accounts)
    qos = _names("critical_qos", trust.critical_qos)
    values: dict[str, str] = {
        "CRITICAL_USERS": lua_set(users),
        "CRITICAL_ACCOUNTS": lua_set(accounts),
        "CRITICAL_QOS": lua_set(qos),
        "OPERATOR_UIDS": lua_set(uids),
        "DEADLINE_HORIZON_S": str(horizon),
        "DEADLINE_HORIZON_TEXT": lua_string(horizon_text(horizon)),
        "MAX_INT": str(tags.MAX_INT),
        "MAX_DIGITS": str(tags.MAX_DIGITS),
        "MAX_GPUS": str(tags.MAX_GPUS),
        "MIN_EPOCH": str(tags.MIN_EPOCH),
        "MAX_EPOCH": str(tags.MAX_EPOCH),
        "MAX_PART_BYTES": str(tags.MAX_PART_BYTES),
        "MAX_COMMENT_BYTES": str(tags.MAX_COMMENT_BYTES),
        "MAX_MODEL_CHARS": str(MAX_MODEL_CHARS),
        "CLASSES": lua_set(tags.SERVICE_CLASSES),
        "SUMMARY": (f"critical granted to {len(set(users))} users, {len(set(accounts))} "
                    f"accounts, {len(set(qos))} QOS; horizon {horizon} s; "
                    f"{len(uids)} operator uids"),
    }
    return fill(template_text(), values)


def template_text() -> str:
    return (resources.files("slurm_rl") / TEMPLATE).read_text(encoding="utf-8")


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace every `@NAME@`; a placeholder without a value, or a value without a
    placeholder, is a programming error."""
    used: set[str] = set()

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise KeyError(f"{TEMPLATE}: no value for @{name}@")
        used.add(name)
        return values[name]

    text = _PLACEHOLDER.sub(one, template)
    unused = set(values) - used
    if unused:
        raise KeyError(f"{TEMPLATE}: no placeholder for {', '.join(sorted(unused))}")
    return text


def operator_uid(text: str) -> int:
    """A user name or a numeric uid, as `--operator` takes it."""
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise RenderError(f"--operator: no user {text!r} on this host") from None


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` (mode 0644) so that slurmctld never reads half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@click.group("admin")
def admin() -> None:
    """Files slurm-rl hands to Slurm (site administration)."""


@admin.command("job-submit-lua")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="slurm-rl config whose [trust] section holds the grants "
              "(default: $SLURM_RL_CONFIG, else /etc/slurm-rl/slurm-rl.toml).")
@click.option("--operator", "operators", multiple=True, metavar="USER|UID",
              help="A user trusted like root (e.g. SlurmUser); repeatable. uid 0 always is.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here (atomically, mode 0644) instead of to stdout; put it next to "
              "slurm.conf.")
def job_submit_lua_command(config_file: Path | None, operators: tuple[str, ...],
                           output: Path | None) -> None:
    """Print the job_submit.lua that enforces the site's grants in slurmctld."""
    try:
        config = load_config(config_file)
        text = render_job_submit_lua(config.trust,
                                     operator_uids=[operator_uid(o) for o in operators])
    except (ConfigError, RenderError) as exc:
        raise click.ClickException(str(exc)) from None
    if config.trust.critical_accounts or config.trust.critical_qos:
        click.echo("note: critical_accounts / critical_qos mean something only where slurmctld "
                   "enforces accounts and QOS (AccountingStorageEnforce=associations,qos); "
                   "without that any user names any account, and the daemon ignores them",
                   err=True)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        write_atomically(output, text)
    except OSError as exc:
        raise click.ClickException(f"{output}: can not write ({exc.strerror})") from None
    click.echo(f"wrote {output}; slurmctld reloads it when the file changes (`scontrol "
               "reconfigure` only when JobSubmitPlugins=lua is newly set)", err=True)

"""The two lines `make demo` ends with name the engine it ran on (pure; no cluster)."""

from __future__ import annotations

import pytest

from slurm_rl import demo


@pytest.mark.parametrize(("engine", "line"), [
    ("docker", 'eval "$(docker/cluster --engine docker env)"'),
    ("native", 'eval "$(docker/cluster --engine native env)"'),
    ("", 'eval "$(docker/cluster --engine native env)"'),  # demo run by hand: native
])
def test_the_paste_lines_name_the_engine(engine: str, line: str, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLURM_RL_ENGINE", engine)
    demo.print_next_steps()
    printed = [ln.strip() for ln in capsys.readouterr().out.splitlines() if ln.startswith("    ")]
    assert printed == ["source .venv/bin/activate", line]


def test_readme_shows_the_default_engines_lines() -> None:
    assert demo.NEXT_STEPS == demo.next_steps("docker")

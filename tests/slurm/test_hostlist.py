"""Slurm host lists expanded with bounds (slurm_rl/slurm/hostlist.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_rl.slurm.hostlist import HostlistError, expand


@pytest.mark.parametrize(
    ("text", "names"),
    [("", ()), ("node1", ("node1",)), ("node[1-3]", ("node1", "node2", "node3")),
     ("node[1,3-4],gpu7", ("node1", "node3", "node4", "gpu7")),
     ("g[08-10]", ("g08", "g09", "g10")), ("r[1-2]n[1-2]", ("r1n1", "r1n2", "r2n1", "r2n2")),
     ("a-b.c[0]", ("a-b.c0",)), ("n[1]-ib", ("n1-ib",))],
)
def test_expand(text: str, names: tuple[str, ...]) -> None:
    assert expand(text, 10) == names


@pytest.mark.parametrize(
    ("text", "why"),
    [("n[0-99999999999999]", "more than 4"), ("n[1-5]", "more than 4"),
     ("r[1-3]n[1-2]", "more than 4"), ("a,b,c,d,e", "more than 4"), ("n[1-2", "unclosed"),
     ("n]1[", "unbalanced"), ("n[[1]]", "nested"), ("n[3-1]", "backwards"), ("n[]", "not a"),
     ("n[1-]", "bad range"), ("n[١]", "not a host list"), ("a,,b", "bad node name"),
     ("n\nx", "not a host list"), ("n[12345678901234567]", "bad range"),
     ("x" * 256, "bad node name")],
)
def test_expand_refuses(text: str, why: str) -> None:
    with pytest.raises(HostlistError, match=why):
        expand(text, 4)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="n0123456789[],-x ", max_size=40), st.integers(0, 50))
def test_expand_is_bounded_and_raises_only_hostlist_error(text: str, bound: int) -> None:
    try:
        names = expand(text, bound)
    except HostlistError:
        return
    assert len(names) <= bound and all(names)

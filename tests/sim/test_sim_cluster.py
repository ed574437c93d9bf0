from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_rl.sim.cluster import Cluster, place_on, split


def test_split_even() -> None:
    assert split(16, 4) == (4, 4, 0)
    assert split(6, 4) == (2, 3, 0)
    assert split(7, 4) == (2, 3, 1)
    assert split(3, 4) == (1, 3, 0)


def test_best_fit_on_one_node() -> None:
    c = Cluster(3, 4)
    c.take(((0, 1),))  # node0: 3 free
    c.take(((1, 3),))  # node1: 1 free
    assert c.place(1) == ((1, 1),)  # tightest node
    assert c.place(2) == ((0, 2),)
    assert c.place(4) == ((2, 4),)
    c.take(((2, 4),))
    assert c.place(4) is None  # 4 GPUs free in all, but on no one node


def test_wide_job_takes_whole_nodes() -> None:
    c = Cluster(4, 4)
    c.take(((1, 1),))
    assert c.place(16) is None  # 15 GPUs free, but node1 is not idle
    assert c.place(12) == ((0, 4), (2, 4), (3, 4))
    c.give(((1, 1),))
    assert c.place(16) == ((0, 4), (1, 4), (2, 4), (3, 4))
    assert c.place(8) == ((0, 4), (1, 4))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.sampled_from([1, 2, 4, 8]), st.data())
def test_bucketed_placement_matches_the_plain_scan(nodes: int, per_node: int,
                                                   data: st.DataObject) -> None:
    c = Cluster(nodes, per_node)
    for _ in range(data.draw(st.integers(0, 12))):
        g = data.draw(st.integers(1, nodes * per_node))
        alloc = c.place(g)
        assert alloc == place_on(c.free, g, per_node)
        if alloc is not None:
            assert sum(x for _, x in alloc) == g
            assert len({n for n, _ in alloc}) == len(alloc) == -(-g // per_node)
            c.take(alloc)
            c.audit()
            assert all(0 <= f <= per_node for f in c.free)

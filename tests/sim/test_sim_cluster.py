from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_rl.sim.cluster import Cluster, place_cons_tres, place_in_buckets, place_on, split


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


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.sampled_from([1, 2, 4, 8]), st.data())
def test_placement_on_a_changed_free_map_from_buckets(nodes: int, per_node: int,
                                                     data: st.DataObject) -> None:
    """What the backfill reservation does: the buckets of a free map that differs from the
    cluster's on a few nodes (GPUs freed there), placed in, as place_on would."""
    c = Cluster(nodes, per_node)
    for _ in range(data.draw(st.integers(0, 8))):
        alloc = c.place(data.draw(st.integers(1, nodes * per_node)))
        if alloc is not None:
            c.take(alloc)
    future = list(c.free)
    changed = data.draw(st.lists(st.integers(0, nodes - 1), max_size=8))
    for n in changed:
        future[n] = data.draw(st.integers(future[n], per_node))
    buckets = c.buckets_with(future, changed)
    assert [sorted(b) for b in buckets] == buckets and sum(map(len, buckets)) == nodes
    assert all(future[n] == f for f, b in enumerate(buckets) for n in b)
    assert c.free_counts() == [c.free.count(f) for f in range(per_node + 1)]
    for g in range(1, nodes * per_node + 1):
        assert place_in_buckets(buckets, g, per_node) == place_on(future, g, per_node)


# --- cons_tres placement: cases measured on the test cluster (Slurm 22.05.8, 4 nodes x 8 CPUs
# x 4 GPUs, select/cons_tres CR_Core, equal node weights), node indexes 0-3 = node1-node4 -----

def test_cons_tres_first_node_of_the_tightest_run() -> None:
    # Measured: jobs of 1, 3 and 2 GPUs pinned to node1, node2, node3; then sbatch --gres=gpu:1
    # went to node1 twice (best fit would pick node2, which had 1 GPU free), a 2-GPU job to
    # node3, and the next 1-GPU job to node4: node1-node2 form a run with 5 + 7 free CPUs,
    # node4 alone has 8, and the smaller sufficient run wins.
    c = Cluster(4, 4, placement="cons_tres", cpus_per_node=8)
    bf = Cluster(4, 4)
    for pinned in (((0, 1),), ((1, 3),), ((2, 2),)):
        c.take(pinned)
        bf.take(pinned)
    assert bf.place(1) == ((1, 1),)  # best fit, for contrast
    got = []
    for g in (1, 1, 2, 1):
        alloc = c.place(g)
        assert alloc is not None
        c.take(alloc)
        got.append(alloc)
    assert got == [((0, 1),), ((0, 1),), ((2, 2),), ((3, 1),)]


def test_cons_tres_free_cpus_decide_between_runs() -> None:
    # Measured: node1 one 1-GPU job (1 CPU), node2 full, node3 and node4 a 1-GPU job with 7 and
    # 6 CPUs: the next 1-GPU job went to node3 (run node3-node4: 1 + 2 free CPUs < node1's 7).
    assert place_cons_tres([3, 0, 3, 3], [1, 1, 7, 6], 1, 4, 8) == ((2, 1),)


def test_cons_tres_wide_job_needs_a_run_of_whole_nodes() -> None:
    # Measured: a 1-GPU job on node2; --gres=gpu:4 -N 2 went to node[3-4], the only run of two
    # idle nodes.
    assert place_cons_tres([4, 3, 4, 4], [0, 1, 0, 0], 8, 4, 8) == ((2, 4), (3, 4))
    # No run is long enough: the biggest run first, then the next.
    assert place_cons_tres([4, 0, 4, 4, 0, 4], [0] * 6, 12, 4, 8) == ((0, 4), (2, 4), (3, 4))
    assert place_cons_tres([4, 0, 4, 0], [0] * 4, 12, 4, 8) is None


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.sampled_from([1, 2, 4, 8]), st.data())
def test_cons_tres_places_whole_gangs_within_capacity(nodes: int, per_node: int,
                                                      data: st.DataObject) -> None:
    c = Cluster(nodes, per_node, placement="cons_tres")
    for _ in range(data.draw(st.integers(0, 12))):
        g = data.draw(st.integers(1, nodes * per_node))
        alloc = c.place(g)
        if alloc is None:
            # Best fit finds no place either, unless cons_tres wants uniform whole nodes.
            continue
        assert sum(x for _, x in alloc) == g
        assert len({n for n, _ in alloc}) == len(alloc) == -(-g // per_node)
        assert all(c.free[n] >= x for n, x in alloc)
        c.take(alloc)
        c.audit()

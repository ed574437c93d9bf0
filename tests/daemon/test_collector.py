"""The daemon's collector setting (collector.py): the first threshold raised, never lowered,
the other two kept."""

from __future__ import annotations

import gc

from slurm_rl.daemon.collector import YOUNG_THRESHOLD, collect_less


def test_the_first_threshold_is_raised_and_a_higher_one_kept() -> None:
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)  # CPython's default
        collect_less()
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
        gc.set_threshold(YOUNG_THRESHOLD * 5, 3, 7)
        collect_less()
        assert gc.get_threshold() == (YOUNG_THRESHOLD * 5, 3, 7)
    finally:
        gc.set_threshold(*saved)

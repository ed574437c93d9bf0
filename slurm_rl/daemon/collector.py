"""The daemon process's garbage collector: young objects collected less often.

A cycle at 10,000 pending jobs makes some 100,000 objects that live for a cycle or less (the
policy's records and orders, the plan, the keys compared). With CPython's default first
threshold (700 allocations) most of them outlive a young collection and are promoted, and every
few cycles a full collection walks the whole heap, in the middle of a cycle (0.1 s and more at
10,000 jobs). With the first threshold at `YOUNG_THRESHOLD`, most of them are freed by reference
counting before any collection looks at them; cyclic garbage is still collected, a little later.
Measured in docs/daemon.md ("Measured on the test cluster").
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000
"""Allocations (less deallocations) of tracked objects between two young collections."""


def collect_less() -> None:
    """Raise the collector's first threshold to YOUNG_THRESHOLD (a higher one is kept); the
    daemon does this once at start, for its whole process."""
    young, middle, old = gc.get_threshold()
    if young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)

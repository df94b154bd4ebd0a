"""``all_distinct``: repeats found by either path, and the mask path's memory."""

from __future__ import annotations

import subprocess
import sys

import torch

from pyg_dist.kernels.distinct import MASK_RANGE_PER_ID, all_distinct


def test_repeats_are_found_by_the_mask_and_by_the_sort():
    ids = torch.randperm(1000)[:100]
    for bound in (1000, 100 * MASK_RANGE_PER_ID + 1):  # mask, then unique
        assert all_distinct(ids, bound)
        repeated = torch.cat([ids, ids[7:8]])
        assert not all_distinct(repeated, bound)
    assert all_distinct(torch.tensor([5]), 10) and all_distinct(torch.empty(0, dtype=torch.long), 1)


_PROBE = """
import torch
from pyg_dist.kernels.distinct import all_distinct
from pyg_dist.malloc_tuning import tune_malloc
tune_malloc()  # as in a server: what is freed stays resident, so a peak shows
def anon():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon"))
ids = torch.randperm(32_000_000)[:8_000_000]
before = anon()
assert all_distinct(ids, 32_000_000)
print((anon() - before) * 1024)
"""


def test_the_mask_costs_a_byte_per_possible_id_not_eight():
    # A server checks its part's edge ids on load with this: a bool mask's
    # sum() went through an int64 copy of it (+256 MB at 32M edges).
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True, timeout=120)
    grown = int(out.stdout.split()[-1])
    assert grown < 64 << 20, grown  # the 32 MB mask and the allocator's slack

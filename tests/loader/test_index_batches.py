"""index_batches: torch's batch samplers' batches as tensors, drawn alike."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from pyg_dist.loader.index_batches import index_batches


def _both(make_batch_sampler):
    """(torch's batches, index_batches' batches, global RNG states after each)."""
    torch.manual_seed(7)
    expected = [torch.tensor(b, dtype=torch.long) for b in make_batch_sampler()]
    expected_state = torch.get_rng_state()
    torch.manual_seed(7)
    got = list(index_batches(make_batch_sampler()))
    return expected, got, expected_state, torch.get_rng_state()


@pytest.mark.parametrize("num_inputs,batch_size", [(10, 3), (12, 4), (5, 8), (1, 1)])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_the_same_batches_as_torch(num_inputs, batch_size, drop_last, shuffle):
    def make():
        sampler = RandomSampler(range(num_inputs)) if shuffle else \
            SequentialSampler(range(num_inputs))
        return BatchSampler(sampler, batch_size, drop_last)

    expected, got, expected_state, state = _both(make)
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        assert g.dtype == torch.long and torch.equal(g, e)
    assert torch.equal(state, expected_state)  # the global seed drawn as torch draws it


def test_a_given_generator_ends_in_the_same_state():
    """torch draws a second permutation once the first is used up; so must
    the tensors' path, or a generator shared with other code would drift."""
    states = []
    for use_tensors in (False, True):
        gen = torch.Generator().manual_seed(3)
        batch_sampler = DataLoader(range(9), batch_size=3, shuffle=True,
                                   generator=gen).batch_sampler
        batches = index_batches(batch_sampler) if use_tensors else iter(batch_sampler)
        first = next(batches)
        states.append((torch.as_tensor(first).tolist(), gen.get_state()))
        rest = [torch.as_tensor(b).tolist() for b in batches]
        states.append((rest, gen.get_state()))
    assert states[0][0] == states[2][0] and torch.equal(states[0][1], states[2][1])
    assert states[1][0] == states[3][0] and torch.equal(states[1][1], states[3][1])


def test_a_batch_owns_its_positions():
    batches = list(index_batches(BatchSampler(SequentialSampler(range(10)), 4, False)))
    assert [b.untyped_storage().nbytes() for b in batches] == [32, 32, 16]


@pytest.mark.parametrize("make", [
    lambda: BatchSampler(RandomSampler(range(10), replacement=True), 3, False),
    lambda: BatchSampler(RandomSampler(range(10), num_samples=20), 3, False),
    lambda: BatchSampler([0, 1, 2], 2, False),
    lambda: [[0, 1], [2]],
])
def test_other_samplers_are_left_as_they_are(make):
    assert index_batches(make()) is None

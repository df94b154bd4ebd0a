"""Sampling around seed links, with negative links drawn across parts.

:func:`sample_from_edges` is what :class:`~pyg_dist.sampler.DistNeighborSampler`
does for PyG's ``BaseSampler.sample_from_edges``: it hands PyG's own
``edge_sample`` (which merges the endpoints into seed nodes, samples around
them and lays out ``metadata`` as PyG's ``LinkLoader`` reads it) a
:class:`SeededNegativeSampling` in place of the user's
:class:`~torch_geometric.sampler.NegativeSampling`.

Negative endpoints are global node ids drawn on the trainer, uniformly over
``[0, num_nodes)`` (``num_nodes`` comes from the servers' ``meta``, the same
number the partition book covers) or by the user's ``src_weight`` /
``dst_weight``; no topology is fetched for them. As in PyG, a negative pair
may happen to be an edge of the graph (no false-negative filter). The draw
uses a generator seeded from the batch's seed, so a fixed loader seed
reproduces every negative whatever thread samples the batch (PyG's own
``NegativeSampling.sample`` draws from torch's global generator).

Temporal seed links (``edge_label_time``) are sampled in their past by the
sampler's node path; negatives take the times of the positives (PyG's
``edge_sample`` without node times). Heterogeneous seed links (an edge type
``(src, rel, dst)``) draw negative sources among the ``src`` nodes and
negative destinations among the ``dst`` nodes, and PyG's ``edge_sample``
hands the sampler both endpoint types' seeds at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Optional, Union

import torch
from torch import Tensor
from torch_geometric.sampler import (
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    SamplerOutput,
)
from torch_geometric.sampler.neighbor_sampler import edge_sample

from pyg_dist.errors import SamplerError
from pyg_dist.sampler.metadata import SamplerMetadata

# Salt of the negatives' generator, so that it never equals a hop's seed.
_NEGATIVE_SALT = 0x6E65675F73616D70


class SeededNegativeSampling(NegativeSampling):
    """PyG's ``NegativeSampling`` whose draws come from one batch's generator.

    Args:
        config: The user's negative sampling configuration.
        seed: The batch's random seed.

    Raises:
        SamplerError: if a weight vector does not have one entry per node.
    """

    def __init__(self, config: NegativeSampling, seed: int) -> None:
        super().__init__(config.mode, config.amount, config.src_weight, config.dst_weight)
        self.generator = torch.Generator().manual_seed((int(seed) ^ _NEGATIVE_SALT) % (1 << 63))

    def sample(self, num_samples: int, endpoint: Literal["src", "dst"],
               num_nodes: Optional[int] = None) -> Tensor:
        """Draws ``num_samples`` global node ids for ``endpoint``.

        Args:
            num_samples: How many negatives to draw.
            endpoint: ``"src"`` or ``"dst"`` (which weight vector applies).
            num_nodes: Number of nodes of the endpoint's node type.

        Raises:
            SamplerError: if there are no nodes to draw from, or a weight
                vector does not fit.
        """
        weight = self.src_weight if endpoint == "src" else self.dst_weight
        if not num_nodes:
            raise SamplerError(f"negative sampling needs nodes to draw {endpoint} endpoints "
                               f"from, but the graph has {num_nodes or 0}; drop neg_sampling")
        if weight is None:
            return torch.randint(num_nodes, (num_samples,), generator=self.generator)
        if weight.numel() != num_nodes:
            raise SamplerError(f"NegativeSampling.{endpoint}_weight needs one entry per node "
                               f"({num_nodes}), got {weight.numel()}")
        return torch.multinomial(weight.to(torch.float), num_samples, replacement=True,
                                 generator=self.generator)


def check_negative_sampling(neg_sampling: Optional[NegativeSampling], num_nodes: int,
                            num_dst_nodes: Optional[int] = None) -> None:
    """Refuses a negative sampling configuration that cannot draw on this graph.

    Args:
        neg_sampling: The configuration (already cast by PyG), or ``None``.
        num_nodes: Number of nodes of the served graph (of the seed links'
            source type on a heterogeneous graph).
        num_dst_nodes: Nodes of the destination type; ``None``: as
            ``num_nodes``.

    Raises:
        SamplerError: naming the problem.
    """
    if neg_sampling is None:
        return
    counts = {"src": num_nodes, "dst": num_nodes if num_dst_nodes is None else num_dst_nodes}
    for endpoint, count in counts.items():
        if count <= 0:
            raise SamplerError(f"negative sampling draws {endpoint} endpoints among the "
                               f"graph's nodes of that type, but the served graph has none; "
                               f"drop neg_sampling")
    for endpoint in ("src", "dst"):
        weight = getattr(neg_sampling, f"{endpoint}_weight")
        if weight is None:
            continue
        count = counts[endpoint]
        if not isinstance(weight, Tensor) or weight.dim() != 1 or weight.numel() != count:
            raise SamplerError(f"NegativeSampling.{endpoint}_weight must be a 1-D tensor with "
                               f"one entry per node ({count})")
        if weight.is_complex() or bool((weight < 0).any()) or not bool(weight.sum() > 0):
            raise SamplerError(f"NegativeSampling.{endpoint}_weight must be non-negative with "
                               f"a positive sum")


def sample_from_edges(
    sample_fn: Callable[..., Union[SamplerOutput, HeteroSamplerOutput]],
    index: EdgeSamplerInput,
    num_nodes: Union[int, dict[str, int]],
    disjoint: bool,
    neg_sampling: Optional[NegativeSampling],
    seed: int,
) -> SamplerOutput:
    """Samples the subgraph around seed links and their negatives.

    Args:
        sample_fn: ``sample_fn(seed_nodes, seed_time, seed=...)``: samples
            around global seed node ids (the sampler's node path); on a
            heterogeneous graph seeds and times are dicts per node type.
        index: The seed links (global ids), their labels and input ids, and
            on a heterogeneous graph their edge type (``input_type``).
        num_nodes: Number of nodes of the graph, or per node type
            (negatives are drawn below).
        disjoint: Whether the sampler gives every seed its own subgraph.
        neg_sampling: PyG's negative sampling configuration, or ``None``.
        seed: The batch's random seed (neighbours and negatives).

    Returns:
        PyG's ``SamplerOutput`` whose ``metadata`` is what PyG's
        ``LinkLoader`` expects: ``(input_id, edge_label_index, edge_label,
        edge_label_time)`` without or with binary negatives,
        ``(input_id, src_index, dst_pos_index, dst_neg_index, seed_time)``
        with triplet ones; indices point into ``node``.

    Raises:
        SamplerError: on seed links outside the graph, or when negatives
            cannot be drawn.
    """
    if isinstance(num_nodes, dict):
        if index.input_type is None:
            raise SamplerError("the served graph is heterogeneous: seed links need their "
                               "edge type (edge_label_index=(edge_type, index))")
        num_src, num_dst = num_nodes[index.input_type[0]], num_nodes[index.input_type[-1]]
    else:
        num_src = num_dst = num_nodes
    _check_seed_links(index, num_src, num_dst)
    neg = None
    if neg_sampling is not None:
        check_negative_sampling(neg_sampling, num_src, num_dst)
        neg = SeededNegativeSampling(neg_sampling, seed)

    def node_path(seed_nodes: Union[Tensor, dict], seed_time: Optional[Union[Tensor, dict]] = None
                  ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        return sample_fn(seed_nodes, seed_time, seed=seed)

    out = edge_sample(index, node_path, num_nodes, disjoint, None, neg)
    out.metadata = SamplerMetadata(out.metadata)
    return out


def _check_seed_links(index: EdgeSamplerInput, num_src: int, num_dst: int) -> None:
    """Seed links are global ids of this graph; anything else is refused here,
    before a request is built."""
    for name, ids, num_nodes in (("source", index.row, num_src),
                                 ("destination", index.col, num_dst)):
        if not isinstance(ids, Tensor) or ids.is_floating_point() or ids.is_complex() \
                or ids.dtype == torch.bool:
            raise SamplerError(f"seed link {name} ids must be an integer tensor, got "
                               f"{getattr(ids, 'dtype', type(ids).__name__)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
            raise SamplerError(f"seed link {name} ids must lie in [0, {num_nodes}), got "
                               f"min {int(ids.min())}, max {int(ids.max())}")

"""How a batch's hops are sampled: one typed, hashable settings object.

:class:`HopSettings` is what the hop loop (:mod:`pyg_dist.hops.loop`) and one
hop on the owning servers (:mod:`pyg_dist.hops.one_hop`) read: whether to
draw with replacement, disjoint trees, the subgraph kind, the weight and time
attributes, the deadline, and how every hop of a batch derives its own seed.
A :class:`~pyg_dist.sampler.DistNeighborSampler` holds one; a server
coordinating ``sample_tree`` builds one from the request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from torch_geometric.sampler.base import SubgraphType

from pyg_dist.errors import SamplerError
from pyg_dist.kernels.time_sorted import TEMPORAL_STRATEGIES

SEED_BOUND = 1 << 62
"""Seeds (a batch's, a hop's) lie in ``[0, SEED_BOUND)``."""


@dataclass(frozen=True)
class HopSettings:
    """The settings every hop of a batch is sampled with.

    Args:
        replace: Sample with replacement.
        disjoint: Give every seed its own tree (temporal sampling is).
        subgraph_type: PyG's ``SubgraphType``; ``induced`` asks once more
            for every edge among the sampled nodes (``bidirectional`` is the
            sampler's business, after the loop).
        weight_attr: An edge attribute the servers draw neighbours by.
        time_attr: A node or edge time no neighbour may pass the seed's.
        temporal_strategy: ``"uniform"`` or ``"last"``, with ``time_attr``.
        timeout: Deadline of every call in seconds (``None``: the
            configuration's).
    """

    replace: bool = False
    disjoint: bool = False
    subgraph_type: SubgraphType = SubgraphType.directional
    weight_attr: Optional[str] = None
    time_attr: Optional[str] = None
    temporal_strategy: str = "uniform"
    timeout: Optional[float] = None

    @property
    def induced(self) -> bool:
        """Whether the subgraph is every edge among the sampled nodes."""
        return self.subgraph_type == SubgraphType.induced

    @staticmethod
    def hop_seed(base_seed: int, hop: int) -> int:
        """A distinct, deterministic seed per hop of one batch."""
        return (base_seed * 1_000_003 + hop * 0x9E3779B9 + 1) % SEED_BOUND

    def check(self) -> None:
        """Refuses settings no server can sample by.

        Raises:
            SamplerError: naming the setting and what it may be.
        """
        for name, value in (("weight_attr", self.weight_attr), ("time_attr", self.time_attr)):
            if value is not None and (not isinstance(value, str) or not value):
                raise SamplerError(f"{name} must be an attribute name, got {value!r}")
        if self.temporal_strategy not in TEMPORAL_STRATEGIES:
            raise SamplerError(f"temporal_strategy must be one of {TEMPORAL_STRATEGIES}, "
                               f"got {self.temporal_strategy!r}")
        if self.temporal_strategy == "last" and self.time_attr is None:
            raise SamplerError("temporal_strategy='last' takes the most recent neighbours "
                               "and needs a time_attr")
        if self.temporal_strategy == "last" and (self.replace or self.weight_attr is not None):
            raise SamplerError("temporal_strategy='last' is deterministic: it cannot draw "
                               "with replacement or by weight_attr")
        if self.disjoint and self.induced:
            raise SamplerError("disjoint sampling with subgraph_type='induced' is not "
                               "supported (PyG does not support it either)")

    def attribute_args(self) -> dict[str, Any]:
        """The optional arguments of a weighted or temporal ``sample``; none
        for a uniform one, whose request stays as it was."""
        args: dict[str, Any] = {}
        if self.weight_attr is not None:
            args["weight_attr"] = self.weight_attr
        if self.time_attr is not None:
            args["time_attr"] = self.time_attr
            args["temporal_strategy"] = self.temporal_strategy
        return args

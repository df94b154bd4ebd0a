"""What a :class:`~pyg_dist.sampler.DistNeighborSampler` checks of its weight
and time settings (here and on every server), and the seed times of a
temporal batch."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.data import TensorAttr

from pyg_dist.errors import RemoteError, SamplerError, StoreError


def check_attributes(sampler: Any, timeout: Optional[float]) -> Optional[str]:
    """Checks ``sampler``'s weight and time settings here and on every
    server; returns where the time lives (``"node"``, ``"edge"`` or ``None``)."""
    for name, value in (("weight_attr", sampler.weight_attr),
                        ("time_attr", sampler.time_attr)):
        if value is not None and (not isinstance(value, str) or not value):
            raise SamplerError(f"{name} must be an attribute name, got {value!r}")
    if sampler.temporal_strategy not in ("uniform", "last"):
        raise SamplerError(f"temporal_strategy must be 'uniform' or 'last', got "
                           f"{sampler.temporal_strategy!r}")
    if sampler.temporal_strategy == "last" and sampler.time_attr is None:
        raise SamplerError("temporal_strategy='last' takes the most recent neighbours "
                           "and needs a time_attr")
    if sampler.temporal_strategy == "last" and \
            (sampler.replace or sampler.weight_attr is not None):
        raise SamplerError("temporal_strategy='last' is deterministic: it cannot draw "
                           "with replacement or by weight_attr")
    if sampler.weight_attr is None and sampler.time_attr is None:
        return None
    try:
        return sampler.graph_store.check_sample_attributes(
            sampler.weight_attr, sampler.time_attr, sampler.temporal_strategy, timeout=timeout)
    except (RemoteError, StoreError) as exc:
        raise SamplerError(f"the servers cannot sample by weight_attr="
                           f"{sampler.weight_attr!r}, time_attr={sampler.time_attr!r}: "
                           f"{getattr(exc, 'remote_message', None) or exc}") from exc


def seed_times(sampler: Any, seeds: Tensor, time: Optional[Tensor],
               node_type: Optional[str] = None) -> Optional[Tensor]:
    """The int64 time of every seed: ``time`` (``input_time``) checked,
    or the seeds' own node times; ``None`` without ``time_attr``."""
    if sampler.time_attr is None:
        if time is not None:
            raise SamplerError("seed times (input_time) were given but time_attr is "
                               "None; set time_attr to sample temporally")
        return None
    if time is None:
        if sampler.time_kind != "node" or sampler.feature_store is None:
            raise SamplerError(f"time_attr {sampler.time_attr!r} is an edge time: pass "
                               f"input_time, one time per seed")
        time = sampler.feature_store.get_tensor(TensorAttr(node_type, sampler.time_attr, seeds))
    if not isinstance(time, Tensor) or time.is_floating_point() or time.is_complex() \
            or time.dtype == torch.bool or time.numel() != seeds.numel():
        raise SamplerError(
            f"input_time for time_attr {sampler.time_attr!r} must hold one integer time per "
            f"seed ({seeds.numel()}), got "
            f"{getattr(time, 'dtype', type(time).__name__)} of "
            f"{getattr(time, 'numel', lambda: '?')()} values")
    return time.view(-1).to(torch.long).cpu()

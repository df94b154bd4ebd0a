"""Which ``DataLoader`` and ``NodeLoader`` arguments each loader path honours.

:class:`~pyg_dist.loader.DistNeighborLoader` produces batches on one of
three paths: synchronously on the caller's thread (``prefetch=0``,
``num_workers=0``), on worker threads (``prefetch=K``), or in
``DataLoader`` worker processes (``num_workers > 0``). An argument of
:class:`torch.utils.data.DataLoader` or PyG's ``NodeLoader`` is either
honoured on a path or refused here, before anything is built, with a
:class:`~pyg_dist.errors.LoaderError` that names it and says what to do:
nothing is accepted and then dropped. ``docs/loader.md`` has the table.
"""

from __future__ import annotations

import logging
import multiprocessing
import warnings
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.sampler.base import SubgraphType

from pyg_dist.errors import LoaderError, SamplerError
from pyg_dist.sampler.dist_neighbor_sampler import DistNeighborSampler

logger = logging.getLogger(__name__)

# DataLoader arguments that configure worker processes; without processes
# (prefetch threads or the synchronous path) there is nothing they act on.
_WORKER_PROCESS_ONLY = {
    "worker_init_fn": "it runs at the start of each DataLoader worker process",
    "multiprocessing_context": "it picks how DataLoader worker processes start",
    "prefetch_factor": "it counts batches per DataLoader worker process (for worker "
                       "threads use prefetch=K)",
    "persistent_workers": "it keeps DataLoader worker processes alive between epochs",
}

# Arguments PyG's NodeLoader would take and then drop or overwrite.
_BUILT_BY_THE_LOADER = {
    "collate_fn": "sampling and fetching features is the loader's collate step; change "
                  "batches with transform= (the finished Data) or transform_sampler_output= "
                  "(the SamplerOutput)",
    "dataset": "the loader's dataset is the positions of its inputs; pass input_nodes= "
               "(DistNeighborLoader) or edge_label_index= (DistLinkNeighborLoader)",
    "input_id": "input_id is derived from the inputs as in PyG (positions in input_nodes or "
                "edge_label_index)",
}


def check_dataloader_kwargs(kwargs: dict[str, Any], *, prefetch: int, ddp: bool,
                            filter_per_worker: Optional[bool]) -> None:
    """Refuses every ``DataLoader`` argument the chosen path would not honour.

    Args:
        kwargs: The loader's ``**kwargs`` (``DataLoader`` arguments).
        prefetch: The loader's ``prefetch`` depth.
        ddp: Whether the loader splits its inputs across DDP ranks itself.
        filter_per_worker: PyG's ``filter_per_worker`` as passed.

    Raises:
        LoaderError: naming the first argument that would be ignored or
            that contradicts the others, and what to do instead.
    """
    for name, why in _BUILT_BY_THE_LOADER.items():
        if kwargs.get(name) is not None:
            raise LoaderError(f"the loader does not take {name}=: {why}")
    if "batch_size" in kwargs and kwargs["batch_size"] is None:
        raise LoaderError("batch_size=None is not supported; pass an int")
    num_workers = kwargs.get("num_workers", 0)
    if prefetch and num_workers:
        raise LoaderError("prefetch (worker threads) and num_workers (worker processes) "
                          "are alternatives; set one of them to 0")
    if not num_workers:
        path = f"prefetch={prefetch}" if prefetch else "prefetch=0 and num_workers=0"
        for name, why in _WORKER_PROCESS_ONLY.items():
            if kwargs.get(name):
                raise LoaderError(f"{name}= needs num_workers > 0 ({why}); with {path} there "
                                  f"are no worker processes, so drop {name} or pass "
                                  f"num_workers")
        if kwargs.get("pin_memory_device"):
            raise LoaderError("pin_memory_device= is deprecated by torch (it pins for the "
                              "current accelerator); drop it, and pass device= to have "
                              "batches copied to a device")
    else:
        method = _start_method(kwargs.get("multiprocessing_context"))
        if method != "fork":
            raise LoaderError(
                f"num_workers > 0 needs worker processes started by 'fork', got {method!r} "
                f"(multiprocessing_context, or this platform's default): the remote stores "
                f"hold live connections and cannot be pickled into a fresh process; pass "
                f"multiprocessing_context='fork' where the platform has it, or use "
                f"prefetch=K (worker threads) instead of num_workers")
    if prefetch and filter_per_worker is False:
        raise LoaderError("filter_per_worker=False asks to join features on the main "
                          "thread, but prefetch worker threads always fetch features (that "
                          "is what overlaps with training); drop it, or use prefetch=0")
    if ddp and kwargs.get("generator") is not None:
        raise LoaderError("under torch.distributed the shuffle is the same on every rank, "
                          "seeded by seed= (plus the epoch); pass seed= instead of "
                          "generator= (or split=False to opt out of the split)")


def _start_method(context: Any) -> Optional[str]:
    """The start method ``DataLoader`` worker processes will use."""
    if context is None:
        # The process's start method if one was set, else the platform's
        # default (the first one listed); asking get_start_method() without
        # allow_none would fix it for the whole process.
        return multiprocessing.get_start_method(allow_none=True) \
            or multiprocessing.get_all_start_methods()[0]
    if isinstance(context, str):
        return context
    return context.get_start_method()


def pins_memory(pin_memory: bool, *, warn: bool = True) -> bool:
    """Whether batches are pinned, decided as ``DataLoader`` decides it.

    ``pin_memory=True`` pins only when an accelerator is available; without
    one, torch's own ``UserWarning`` is given and batches stay pageable
    (what PyG's ``NeighborLoader`` does on a CPU-only machine).

    Args:
        pin_memory: The ``pin_memory`` argument.
        warn: Give torch's warnings (``False`` where ``DataLoader`` itself
            gives them).

    Returns:
        ``True`` if batches are to be pinned.
    """
    if not pin_memory:
        return False
    accelerator = getattr(torch, "accelerator", None)
    available = accelerator.is_available() if accelerator is not None \
        else torch.cuda.is_available()
    if not available:
        if warn:
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, "
                          "then device pinned memory won't be used.", stacklevel=3)
        return False
    if accelerator is not None and getattr(accelerator.current_accelerator(), "type", "") \
            == "mps":
        # As torch's DataLoader: pinning fails on MPS (pytorch/pytorch#86060).
        if warn:
            warnings.warn("'pin_memory' argument is set as true but not supported on MPS "
                          "now, device pinned memory won't be used.", stacklevel=3)
        return False
    return True


def check_sampler_args(neighbor_sampler: Any, num_neighbors: Any, *, ddp: bool,
                       **settings: Any) -> None:
    """Refuses sampler settings that would not reach the sampler.

    Args:
        neighbor_sampler: The sampler passed to the loader, or ``None`` when
            the loader builds one.
        num_neighbors: The loader's ``num_neighbors``.
        ddp: Whether the loader splits its inputs across DDP ranks (then
            ``seed`` also seeds the split's shuffle).
        **settings: The loader's other sampler settings, as
            ``name=(value, default)`` (``replace``, ``subgraph_type``, ...).

    Raises:
        LoaderError: if a setting is given together with ``neighbor_sampler``.
    """
    if neighbor_sampler is None:
        if num_neighbors is None:
            raise LoaderError("num_neighbors is required (a list of ints, -1 for all "
                              "neighbours) unless you pass neighbor_sampler=")
        return
    # PyG's NumNeighbors holds its list (or dict) in .values.
    own = getattr(neighbor_sampler, "num_neighbors", None)
    own = getattr(own, "values", own)
    given = getattr(num_neighbors, "values", num_neighbors)
    if given is not None and own is not None and _as_list(given) != _as_list(own):
        raise LoaderError(f"num_neighbors={given} differs from the neighbor_sampler's "
                          f"{own}; the sampler's is used, so pass num_neighbors=None or "
                          f"the same")
    for name, (value, default) in settings.items():
        if name == "seed" and ddp:
            continue  # it seeds the rank split's shuffle
        if value != default:
            raise LoaderError(f"{name}={value!r} configures the sampler the loader builds, "
                              f"but neighbor_sampler= was given; configure that sampler "
                              f"instead and drop {name}")


def loader_sampler(data: tuple[Any, Any], neighbor_sampler: Any, num_neighbors: Any, *,
                   ddp: bool, directed: bool, **settings: Any) -> Any:
    """The sampler a loader runs: ``neighbor_sampler`` when given (the
    loader's own sampler settings are then refused, see
    :func:`check_sampler_args`), else a
    :class:`~pyg_dist.sampler.DistNeighborSampler` over ``data`` built from
    them.

    Args:
        data: The loader's ``(feature store, graph store)``.
        neighbor_sampler: The loader's ``neighbor_sampler`` or ``None``.
        num_neighbors: The loader's ``num_neighbors``.
        ddp: Whether the loader splits its inputs across DDP ranks.
        directed: PyG's ``directed``; ``False`` samples induced subgraphs.
        **settings: ``replace``, ``subgraph_type``, ``disjoint``, ``seed``,
            ``timeout``, ``weight_attr``, ``time_attr``,
            ``temporal_strategy`` and ``server_hops`` as the loader got them.

    Raises:
        LoaderError: on settings that would not reach the sampler, or that
            the sampler refuses.
    """
    defaults = {"replace": False, "subgraph_type": SubgraphType.directional,
                "disjoint": False, "seed": None, "timeout": None, "weight_attr": None,
                "time_attr": None, "temporal_strategy": "uniform", "server_hops": None}
    checked = {name: (_subgraph_type(value) if name == "subgraph_type" else value,
                      defaults[name]) for name, value in settings.items()}
    check_sampler_args(neighbor_sampler, num_neighbors, ddp=ddp, directed=(directed, True),
                       **checked)
    if neighbor_sampler is not None:
        return neighbor_sampler
    if not directed:
        settings["subgraph_type"] = SubgraphType.induced
    try:
        return DistNeighborSampler(data, num_neighbors=num_neighbors, **settings)
    except SamplerError as exc:
        raise LoaderError(str(exc)) from exc


def _subgraph_type(value: Any) -> Any:
    try:
        return SubgraphType(value)
    except ValueError:
        return value  # the sampler names the valid values


def _as_list(values: Any) -> Any:
    return values if isinstance(values, dict) else [int(v) for v in values]


def check_store_pair(data: Any, loader: str, local_loader: str) -> tuple[Any, Any]:
    """The ``(feature_store, graph_store)`` a distributed loader was given, checked.

    The feature store is the remote one of :func:`pyg_dist.connect` or a
    :class:`~pyg_dist.store.cached_feature_store.CachedFeatureStore` in front
    of it; the graph store is the remote one.

    Args:
        data: What the user passed as the loader's ``data``.
        loader: The loader's name, for the message.
        local_loader: The PyG loader to use for in-memory data instead.

    Raises:
        LoaderError: naming what was passed and what to pass instead.
    """
    from pyg_dist.store.cached_feature_store import CachedFeatureStore
    from pyg_dist.store.remote_feature_store import RemoteFeatureStore
    from pyg_dist.store.remote_graph_store import RemoteGraphStore

    if not (isinstance(data, (tuple, list)) and len(data) == 2
            and isinstance(data[0], (RemoteFeatureStore, CachedFeatureStore))
            and isinstance(data[1], RemoteGraphStore)):
        raise LoaderError(
            f"{loader} takes the (feature_store, graph_store) pair returned by "
            f"pyg_dist.connect() (or a CachedFeatureStore in front of its feature store), "
            f"got {type(data).__name__}; for an in-memory Data use "
            f"torch_geometric.loader.{local_loader}")
    return data[0], data[1]


def check_seed_times(times: Any, num_seeds: int, time_attr: Optional[str],
                     name: str) -> Optional[Tensor]:
    """Seed times (``input_time``, ``edge_label_time``) as int64 on the CPU,
    one per seed.

    Args:
        times: What the user passed, or ``None``.
        num_seeds: Seed nodes or links.
        time_attr: The time attribute they are compared with, for the message.
        name: The argument's name, for the message.

    Raises:
        LoaderError: naming the argument and ``time_attr``.
    """
    if times is None:
        return None
    if not isinstance(times, Tensor):
        times = torch.as_tensor(times)
    if times.is_floating_point() or times.is_complex() or times.dtype == torch.bool \
            or times.dim() != 1:
        raise LoaderError(f"{name} (seed times for time_attr {time_attr!r}) must be a 1-D "
                          f"integer tensor, got {times.dtype} of shape {tuple(times.shape)}")
    if times.numel() != num_seeds:
        raise LoaderError(f"{name} (seed times for time_attr {time_attr!r}) needs one time "
                          f"per seed ({num_seeds}), got {times.numel()}")
    return times.to(torch.long).cpu()

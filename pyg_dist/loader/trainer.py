"""A training script's DDP side: its process group and its model.

:func:`init_trainer` is the one call a script ported to pyg-dist starts
with: it joins the process group torchrun describes in the environment
(gloo on the CPU, NCCL for CUDA; ``torch.cuda`` set to this rank's device)
and connects to the partition servers, returning the served graph as a
dataset (:class:`~pyg_dist.store.remote_dataset.RemoteDataset`).

:class:`DDPModel` is torch's ``DistributedDataParallel`` that keeps the
model's own methods. A PyG script calls its model's methods next to ``model(...)``: reddit.py's
``model.inference(x_all, subgraph_loader)``, a link predictor's
``model.decode(...)``. Wrapped in ``DistributedDataParallel`` those become
``model.module.inference``: one more changed line each. ``DDPModel`` answers
them itself, for evaluation only: a method called outside DDP's ``forward``
does not synchronise gradients, so while the model trains with gradients on
it refuses, naming ``model(...)`` and ``model.module``.
"""

from __future__ import annotations

import atexit
import logging
import os
from datetime import timedelta
from typing import Any, Optional

import torch
from torch.nn.parallel import DistributedDataParallel

from pyg_dist.errors import PygDistError
from pyg_dist.store.remote_dataset import RemoteDataset

logger = logging.getLogger(__name__)


def init_trainer(addresses: Any = None, *, backend: Optional[str] = None,
                 timeout: Optional[float] = None, **connect_options: Any) -> RemoteDataset:
    """Joins torchrun's process group and connects to the partition servers.

    Under torchrun (``WORLD_SIZE`` in the environment, as ``pyg-dist
    launch`` runs a script) this calls
    :func:`torch.distributed.init_process_group` unless it was called
    already, sets the CUDA device to ``LOCAL_RANK``'s when CUDA is there
    (so that ``torch.device('cuda')`` is this rank's GPU), and destroys the
    group at exit. Without torchrun it only connects.

    Args:
        addresses: Server addresses, or ``None`` for ``PYG_DIST_SERVERS`` /
            ``PYG_DIST_SERVERS_FILE`` (see :func:`pyg_dist.connect`).
        backend: The process group's backend; ``None`` lets torch choose
            (gloo for CPU tensors, NCCL for CUDA ones).
        timeout: Seconds a collective may wait for the other ranks
            (``None``: torch's default), so that a rank whose peer died
            fails instead of waiting.
        **connect_options: Passed to :func:`pyg_dist.connect`.

    Returns:
        The served graph as a one-graph dataset: ``dataset[0]``,
        ``num_features``, ``num_classes``, ``get_idx_split()``.
    """
    from pyg_dist.store.remote_data import RemoteData

    dist = torch.distributed
    if "WORLD_SIZE" in os.environ and dist.is_available() and not dist.is_initialized():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
        dist.init_process_group(backend, **({} if timeout is None
                                            else {"timeout": timedelta(seconds=timeout)}))
        atexit.register(_leave_process_group)
        logger.info("rank %d of %d joined the process group (%s)", dist.get_rank(),
                    dist.get_world_size(), dist.get_backend())
    return RemoteDataset(RemoteData(addresses, **connect_options))


def _leave_process_group() -> None:
    """Destroys the group at exit (no collective: a failing rank must not wait)."""
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


class DDPModel(DistributedDataParallel):
    """``DistributedDataParallel(module, ...)`` whose unknown attributes are the module's.

    Takes the arguments of :class:`torch.nn.parallel.DistributedDataParallel`
    (``device_ids`` default to the module's CUDA device, if it is on one).
    ``model.inference(...)`` then calls ``model.module.inference(...)`` under
    ``torch.no_grad()`` or in ``eval()`` mode; training goes through
    ``model(...)``, as with ``DistributedDataParallel``.

    Raises:
        PygDistError: when a method of the module is reached with gradients
            on in training mode (those gradients would not be reduced).
    """

    def __init__(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        if not args and "device_ids" not in kwargs:
            device = next((p.device for p in module.parameters()), None)
            if device is not None and device.type == "cuda":
                kwargs["device_ids"] = [device.index]
        super().__init__(module, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            module = super().__getattr__("module")
            value = getattr(module, name)  # raises the module's AttributeError
        if callable(value) and module.training and torch.is_grad_enabled():
            raise PygDistError(f"model.{name}() bypasses DistributedDataParallel's gradient "
                              f"sync while training; train through model(...), or call "
                              f"model.module.{name}() under torch.no_grad() / model.eval()")
        return value

"""``DDPModel``: torch's ``DistributedDataParallel`` that keeps the model's own methods.

A PyG script calls its model's methods next to ``model(...)``: reddit.py's
``model.inference(x_all, subgraph_loader)``, a link predictor's
``model.decode(...)``. Wrapped in ``DistributedDataParallel`` those become
``model.module.inference``: one more changed line each. ``DDPModel`` answers
them itself, for evaluation only: a method called outside DDP's ``forward``
does not synchronise gradients, so while the model trains with gradients on
it refuses, naming ``model(...)`` and ``model.module``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from pyg_dist.errors import PygDistError


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

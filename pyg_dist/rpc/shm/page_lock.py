"""Page-locking memory we mapped ourselves, for copies to a CUDA device.

A batch's outputs live in a shared-memory segment that same-host servers
write their rows into (:mod:`pyg_dist.rpc.shm.outputs`). A ``non_blocking``
copy to a GPU reads host memory directly only when that memory is
page-locked; otherwise CUDA first copies it into a pinned staging buffer,
and ``Tensor.pin_memory()`` copies it once more. CUDA page-locks memory it
did not allocate with ``cudaHostRegister``: done once per segment (the pool
keeps segments and reuses them), a batch written there goes to the device
with no host-side copy at all, and ``pin_memory()`` returns it unchanged.

These two functions are the only CUDA calls of the shared-memory transport
(``tests/gpu`` runs them; without CUDA they answer ``False`` and nothing is
locked). Registering several gigabytes is slow (the driver pins every page),
which is why the pool registers a segment once and keeps it.
"""

from __future__ import annotations

import logging
from typing import Any

from torch import Tensor

logger = logging.getLogger(__name__)

# cudaHostRegisterDefault: page-locked, usable by every context (unified
# addressing makes the host pointer valid for copies on any device).
_DEFAULT_FLAGS = 0


def page_lock(memory: Tensor) -> bool:
    """Page-locks the bytes of ``memory`` (a contiguous CPU tensor) for CUDA
    copies; ``False`` when there is no CUDA device or the driver refused (the
    memory stays as it was, usable but pageable).

    Keep the memory mapped until :func:`page_unlock`.
    """
    import torch

    if not torch.cuda.is_available() or memory.device.type != "cpu" or \
            not memory.is_contiguous() or memory.numel() == 0:
        return False
    try:
        status = torch.cuda.cudart().cudaHostRegister(
            memory.data_ptr(), memory.numel() * memory.element_size(), _DEFAULT_FLAGS)
    except (RuntimeError, AttributeError, TypeError) as exc:
        logger.info("cannot page-lock %d bytes for CUDA copies: %s",
                    memory.numel() * memory.element_size(), exc)
        return False
    if int(status) != 0:
        _clear_error(torch)
        logger.info("cudaHostRegister of %d bytes failed (error %d); batches are copied "
                    "into pinned memory instead", memory.numel() * memory.element_size(),
                    int(status))
        return False
    return True


def _clear_error(torch: Any) -> None:
    """Resets CUDA's last error after a refused call, which torch's next
    kernel-launch check would otherwise raise as its own."""
    clear = getattr(torch.cuda.cudart(), "cudaGetLastError", None)
    if clear is not None:
        clear()


def page_unlock(pointer: int) -> None:
    """Undoes :func:`page_lock` of the memory starting at ``pointer`` (its
    ``data_ptr()`` then). Call it only once no copy reads the memory."""
    import torch

    try:
        status = torch.cuda.cudart().cudaHostUnregister(pointer)
    except (RuntimeError, AttributeError, TypeError) as exc:
        logger.debug("cudaHostUnregister failed: %s", exc)
        return
    if int(status) != 0:
        _clear_error(torch)
        logger.debug("cudaHostUnregister failed (error %d)", int(status))

"""The benchmarks package, found by a plain import when it is installed.

``pyg-dist bench`` measures pyg-dist's own rows with the library alone. The
rows that need harness code live in the separately installable benchmarks
package (``benchmarks/`` in a pyg-dist checkout, import name
``pyg_dist_bench``), so that none of that code is installed with the library:

* ``--baseline``: PyG's deprecated ``torch_geometric.distributed`` loader,
  which needs a pure-torch stand-in for pyg-lib's operators registered under
  ``torch.ops.pyg`` and a patch to PyG's sampler;
* ``--link-delay-ms``: a forwarding proxy that holds every message D ms.

:func:`load_harness` imports it, or says how to install it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, cast

from pyg_dist.errors import PygDistError

if TYPE_CHECKING:
    import torch

    from pyg_dist.bench.runner import BenchConfig
    from pyg_dist.bench.timing import Row

PACKAGE = "pyg_dist_bench"
"""Import name of the benchmarks package."""

INSTALL = "pip install -e benchmarks/"
"""How to install it, run in a pyg-dist checkout (it is not on any index)."""


class Harness(Protocol):
    """What ``pyg-dist bench`` uses of the benchmarks package (its top level)."""

    def baseline_rows(self, cfg: BenchConfig, data: Any, seeds: torch.Tensor,
                      workdir: str) -> list[Row]:
        """Measures the baseline rows on ``data`` and the same ``seeds``."""
        ...

    def delayed_link(self, endpoints: Sequence[str], delay_ms: float,
                     host: str) -> AbstractContextManager[list[str]]:
        """Proxies holding every message ``delay_ms`` each way in front of
        ``endpoints``; yields the endpoints to connect to, in order."""
        ...


def load_harness(flag: str) -> Harness:
    """Imports the benchmarks package.

    Args:
        flag: The option that needs it, for the message (``--baseline``).

    Returns:
        The package (its top level implements :class:`Harness`).

    Raises:
        PygDistError: if it is not installed, naming the install command.
    """
    try:
        import pyg_dist_bench
    except ModuleNotFoundError as exc:
        if exc.name != PACKAGE:
            raise  # installed but broken: that traceback is the one to see
        raise PygDistError(
            f"{flag} needs pyg-dist's benchmarks package ({PACKAGE}), which is not "
            f"installed; in a pyg-dist checkout run: {INSTALL}") from None
    return cast(Harness, pyg_dist_bench)

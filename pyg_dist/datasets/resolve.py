"""``module:callable`` strings to graphs, as ``pyg-dist partition DATASET``
takes them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any, Union

from torch_geometric.data import Data, HeteroData

from pyg_dist.errors import DatasetResolveError


def load_dataset(spec: str, search_cwd: bool = False) -> Union[Data, HeteroData]:
    """Resolves a ``"module:attribute"`` string to a graph, like uvicorn's app string.

    The attribute may be dotted (``"pkg.mod:obj.method"``). A callable is
    called with no arguments; a PyG dataset holding one graph yields that graph.

    Args:
        spec: ``"module:callable"``, e.g. ``"pyg_dist.datasets:cora"``.
        search_cwd: Put the current directory first on ``sys.path``, as
            uvicorn does (``--app-dir .``), so that ``mygraph:load`` finds
            ``./mygraph.py`` from the ``pyg-dist`` console script too (whose
            ``sys.path`` starts at its own directory). The CLI passes ``True``.

    Raises:
        DatasetResolveError: if the string is malformed, the module or the
            attribute does not exist, calling it fails, or it does not give a
            :class:`~torch_geometric.data.Data` or
            :class:`~torch_geometric.data.HeteroData`.
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise DatasetResolveError(
            f"dataset {spec!r} is not of the form 'module:callable', e.g. "
            f"'pyg_dist.datasets:cora'")
    if search_cwd and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise DatasetResolveError(
            f"dataset {spec!r}: cannot import module {module_name!r} ({exc}); check "
            f"the spelling and that it is on PYTHONPATH") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise DatasetResolveError(
                f"dataset {spec!r}: {module_name!r} has no attribute {attr_path!r}") from exc
    if callable(obj) and not isinstance(obj, (Data, HeteroData)):
        try:
            obj = obj()
        except Exception as exc:
            raise DatasetResolveError(
                f"dataset {spec!r}: calling it raised {type(exc).__name__}: {exc}") from exc
    return _as_data(obj, spec)


def _as_data(obj: Any, spec: str) -> Union[Data, HeteroData]:
    from torch_geometric.data import Dataset

    if isinstance(obj, Dataset) and len(obj) == 1:
        obj = obj[0]
    if not isinstance(obj, (Data, HeteroData)):
        raise DatasetResolveError(
            f"dataset {spec!r} gave a {type(obj).__name__}, not a torch_geometric "
            f"Data or HeteroData; return one of those")
    return obj

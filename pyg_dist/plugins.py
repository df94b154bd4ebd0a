"""Plugin registry driven by Python entry points.

pyg-dist finds its partitioners and stores the way flake8 finds its plugins:
*find* reads entry-point metadata without importing anything, *load* imports
one plugin when it is first asked for. Core code only ever reaches a plugin
through a :class:`PluginRegistry`, never by importing it by name, so the
bundled plugins are registered exactly like a third party's.

Groups:

* ``pyg_dist.partitioners``: callables assigning every node to a part
  (see :mod:`pyg_dist.partitioning.graph`).
* ``pyg_dist.feature_stores``: factories building the
  :class:`~torch_geometric.data.FeatureStore` a partition server reads from.
* ``pyg_dist.graph_stores``: factories building the
  :class:`~torch_geometric.data.GraphStore` a partition server reads from.
* ``pyg_dist.cache_policies``: callables choosing the nodes a trainer-side
  feature cache keeps (see :mod:`pyg_dist.store.cache_policy`).
* ``pyg_dist.commands``: ``pyg-dist`` sub-commands another distribution
  adds (a module with ``add_parser(subparsers)`` and ``run(args)``): the
  benchmarks package's ``bench``, so the library's wheel holds no harness and
  never imports one by name.

A third party registers a plugin in its own ``pyproject.toml``::

    [project.entry-points."pyg_dist.partitioners"]
    my-partitioner = "my_package.module:MyPartitioner"
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Optional

from pyg_dist.errors import (
    DuplicatePluginError,
    PluginLoadError,
    PluginNotFoundError,
)

PARTITIONERS = "pyg_dist.partitioners"
FEATURE_STORES = "pyg_dist.feature_stores"
GRAPH_STORES = "pyg_dist.graph_stores"
CACHE_POLICIES = "pyg_dist.cache_policies"
COMMANDS = "pyg_dist.commands"
GROUPS = (PARTITIONERS, FEATURE_STORES, GRAPH_STORES, CACHE_POLICIES, COMMANDS)


@dataclass(frozen=True)
class FoundPlugin:
    """A plugin found in entry-point metadata, not imported yet.

    Args:
        group: The entry-point group, e.g. ``"pyg_dist.partitioners"``.
        name: The plugin's name within the group.
        value: The ``module:attribute`` the entry point points at.
        distribution: The name of the distribution that registers it.
        version: That distribution's version.
        entry_point: The underlying entry point, used to load it.
    """

    group: str
    name: str
    value: str
    distribution: str
    version: str
    entry_point: metadata.EntryPoint

    def load(self) -> Any:
        """Imports the plugin and returns the object it points at.

        Raises:
            PluginLoadError: if importing fails, naming the plugin, its
                distribution and version.
        """
        try:
            return self.entry_point.load()
        except Exception as exc:
            raise PluginLoadError(
                f"failed to load plugin {self.name!r} ({self.value}) from "
                f"{self.distribution} {self.version} in group {self.group!r}: "
                f"{type(exc).__name__}: {exc}") from exc


def _dist_of(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "<unknown>", "?"
    return dist.metadata["Name"] or "<unknown>", dist.version or "?"


class PluginRegistry:
    """Finds, loads and caches plugins from entry points.

    Args:
        entry_points: The entry points to register. ``None`` (the default)
            reads the installed distributions' metadata on first use; tests
            pass hand-made :class:`importlib.metadata.EntryPoint` objects.
    """

    def __init__(
        self,
        entry_points: Optional[Iterable[metadata.EntryPoint]] = None,
    ) -> None:
        self._given = list(entry_points) if entry_points is not None else None
        self._found: Optional[dict[str, dict[str, FoundPlugin]]] = None
        self._loaded: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def _find(self) -> dict[str, dict[str, FoundPlugin]]:
        if self._found is not None:
            return self._found
        eps: Iterable[metadata.EntryPoint]
        if self._given is not None:
            eps = self._given
        else:
            eps = [ep for g in GROUPS for ep in metadata.entry_points(group=g)]
        found: dict[str, dict[str, FoundPlugin]] = {g: {} for g in GROUPS}
        for ep in eps:
            if ep.group not in found:
                continue
            dist, version = _dist_of(ep)
            plugin = FoundPlugin(ep.group, ep.name, ep.value, dist, version, ep)
            other = found[ep.group].get(ep.name)
            if other is not None and other.value != plugin.value:
                raise DuplicatePluginError(
                    f"plugin name {ep.name!r} in group {ep.group!r} is "
                    f"registered twice: by {other.distribution} "
                    f"{other.version} ({other.value}) and by {dist} {version} "
                    f"({ep.value}); uninstall one of them")
            found[ep.group][ep.name] = plugin
        self._found = found
        return found

    def found(self, group: Optional[str] = None) -> list[FoundPlugin]:
        """Lists registered plugins without importing them.

        Args:
            group: Restrict to one group; ``None`` lists every group.
        """
        with self._lock:
            found = self._find()
        groups = [group] if group is not None else list(GROUPS)
        return [p for g in groups for _, p in sorted(found.get(g, {}).items())]

    def names(self, group: str) -> list[str]:
        """The names registered in ``group``, sorted."""
        return [p.name for p in self.found(group)]

    def get(self, group: str, name: str) -> Any:
        """Returns the loaded plugin ``name`` of ``group``.

        Raises:
            PluginNotFoundError: if no such plugin is registered; the message
                lists the installed names.
            PluginLoadError: if the plugin fails to import.
        """
        key = (group, name)
        with self._lock:
            if key in self._loaded:
                return self._loaded[key]
            plugin = self._find().get(group, {}).get(name)
            if plugin is None:
                raise PluginNotFoundError(
                    group, name, list(self._find().get(group, {})))
            obj = plugin.load()
            self._loaded[key] = obj
            return obj

    def partitioner(self, name: str) -> Callable[..., Any]:
        """Shortcut for ``get(PARTITIONERS, name)``."""
        return self.get(PARTITIONERS, name)

    def feature_store(self, name: str) -> Callable[..., Any]:
        """Shortcut for ``get(FEATURE_STORES, name)``."""
        return self.get(FEATURE_STORES, name)

    def graph_store(self, name: str) -> Callable[..., Any]:
        """Shortcut for ``get(GRAPH_STORES, name)``."""
        return self.get(GRAPH_STORES, name)

    def cache_policy(self, name: str) -> Callable[..., Any]:
        """Shortcut for ``get(CACHE_POLICIES, name)``."""
        return self.get(CACHE_POLICIES, name)


default_registry = PluginRegistry()
"""The registry built from the installed distributions' entry points."""

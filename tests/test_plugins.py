"""The plugin registry, fed with hand-made entry points and distributions."""

from __future__ import annotations

import textwrap
from importlib.metadata import EntryPoint, PathDistribution

import pytest

from pyg_dist.errors import DuplicatePluginError, PluginLoadError, PluginNotFoundError
from pyg_dist.plugins import FEATURE_STORES, PARTITIONERS, PluginRegistry, default_registry


def _distribution(tmp_path, name: str, version: str, entry_points: str) -> PathDistribution:
    """A real (on-disk) distribution with the given entry_points.txt."""
    info = tmp_path / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    return PathDistribution(info)


RANDOM = "pyg_dist_plugins.partitioners.random:RandomPartitioner"


def test_get_loads_and_caches_the_plugin():
    from pyg_dist_plugins.partitioners.random import RandomPartitioner

    registry = PluginRegistry([EntryPoint("random", RANDOM, PARTITIONERS)])
    assert registry.partitioner("random") is RandomPartitioner
    assert registry.get(PARTITIONERS, "random") is RandomPartitioner
    assert registry.names(PARTITIONERS) == ["random"]
    assert registry.names(FEATURE_STORES) == []


def test_not_found_lists_the_installed_names():
    registry = PluginRegistry([EntryPoint("random", RANDOM, PARTITIONERS),
                               EntryPoint("zeta", RANDOM, PARTITIONERS),
                               EntryPoint("memory", "x:y", FEATURE_STORES)])
    with pytest.raises(PluginNotFoundError) as info:
        registry.partitioner("metis")
    assert info.value.available == ["random", "zeta"]
    assert "random, zeta" in str(info.value) and "pyg-dist plugins" in str(info.value)
    assert isinstance(info.value, LookupError)


def test_duplicate_names_from_two_distributions_error_naming_both(tmp_path):
    first = _distribution(tmp_path, "first-dist", "1.0", """
        [pyg_dist.partitioners]
        fast = first_pkg:Fast
    """)
    second = _distribution(tmp_path, "second-dist", "2.3", """
        [pyg_dist.partitioners]
        fast = second_pkg:Fast
    """)
    registry = PluginRegistry([*first.entry_points, *second.entry_points])
    with pytest.raises(DuplicatePluginError) as info:
        registry.found()
    message = str(info.value)
    assert "'fast'" in message
    assert "first-dist 1.0" in message and "second-dist 2.3" in message


def test_same_entry_point_seen_twice_is_not_a_duplicate(tmp_path):
    dist = _distribution(tmp_path, "one-dist", "1.0", f"""
        [pyg_dist.partitioners]
        random = {RANDOM}
    """)
    registry = PluginRegistry([*dist.entry_points, *dist.entry_points])
    (found,) = registry.found(PARTITIONERS)
    assert (found.distribution, found.version) == ("one-dist", "1.0")


def test_load_failure_is_wrapped_with_name_distribution_and_cause(tmp_path):
    dist = _distribution(tmp_path, "broken-dist", "0.9", """
        [pyg_dist.partitioners]
        broken = no_such_module_for_pyg_dist_tests:Thing
        [pyg_dist.graph_stores]
        attr = pyg_dist_plugins.stores.memory:no_such_factory
    """)
    registry = PluginRegistry(dist.entry_points)
    with pytest.raises(PluginLoadError) as info:
        registry.partitioner("broken")
    message = str(info.value)
    assert "'broken'" in message and "broken-dist 0.9" in message
    assert "ModuleNotFoundError" in message
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    with pytest.raises(PluginLoadError, match="AttributeError"):
        registry.graph_store("attr")
    # Finding never imports: both are listed although neither loads.
    assert {p.name for p in registry.found()} == {"broken", "attr"}


def test_other_groups_are_ignored():
    registry = PluginRegistry([EntryPoint("x", "a:b", "console_scripts")])
    assert registry.found() == []


def test_default_registry_holds_the_bundled_plugins():
    names = {(p.group, p.name): p for p in default_registry.found()}
    for key in [(PARTITIONERS, "metis"), (PARTITIONERS, "random"),
                (FEATURE_STORES, "memory"), (FEATURE_STORES, "mmap")]:
        assert names[key].distribution == "pyg-dist"
    assert callable(default_registry.feature_store("mmap"))
    assert callable(default_registry.graph_store("memory"))

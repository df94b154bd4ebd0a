"""Bundled partitioner plugins (``metis``, ``random``), registered through the
``pyg_dist.partitioners`` entry points in pyg-dist's ``pyproject.toml``."""

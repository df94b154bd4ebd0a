"""Bundled partitioner plugins (``metis``, ``random``, ``hash``, ``streaming``),
registered through the ``pyg_dist.partitioners`` entry points in pyg-dist's
``pyproject.toml``. ``hash``, ``streaming`` and ``random`` also partition a
graph read from files in bounded memory (``assign_stream``)."""

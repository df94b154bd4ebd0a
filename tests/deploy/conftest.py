"""The recipes' tests place commands on simulated hosts."""

from support.hosts import sim_hosts  # noqa: F401 (the fixture)

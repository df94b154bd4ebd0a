"""RpcConfig: defaults, environment overrides, validation."""

from __future__ import annotations

import pytest

from pyg_dist.errors import RpcError
from pyg_dist.rpc.config import RpcConfig


def test_environment_overrides_defaults_and_explicit_values_win():
    env = {"PYG_DIST_TIMEOUT": "2.5", "PYG_DIST_WORKERS": "3", "PYG_DIST_RETRIES": "2"}
    config = RpcConfig.from_env(env, workers=7)
    assert (config.timeout, config.workers, config.retries) == (2.5, 7, 2)
    assert config.max_message_bytes == RpcConfig().max_message_bytes


def test_unparseable_environment_variable_names_itself():
    with pytest.raises(RpcError, match="PYG_DIST_MAX_IN_FLIGHT"):
        RpcConfig.from_env({"PYG_DIST_MAX_IN_FLIGHT": "lots"})


@pytest.mark.parametrize("field, value", [("timeout", 0), ("workers", -1),
                                          ("max_message_bytes", -1), ("retries", -1)])
def test_out_of_range_values_are_refused(field, value):
    with pytest.raises(RpcError, match=field):
        RpcConfig(**{field: value})


@pytest.mark.parametrize("name", ["PYG_DIST_MAX_MESSAGE_BYTES", "PYG_DIST_MAX_REPLY_BYTES",
                                  "PYG_DIST_CLIENT_REPLY_BUDGET"])
def test_byte_sizes_past_2_to_the_40_are_refused_before_any_socket_sees_them(name):
    # 2**62 in the environment once overflowed MAXMSGSIZE inside the server's
    # I/O thread, which then failed to start with no useful message.
    with pytest.raises(RpcError, match=r"at most 2\*\*40"):
        RpcConfig.from_env({name: str(1 << 62)})

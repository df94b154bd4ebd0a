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
    with pytest.raises(RpcError, match="PYG_DIST_REPLY_HWM"):
        RpcConfig.from_env({"PYG_DIST_REPLY_HWM": "lots"})


def test_the_internal_bounds_are_set_in_code_only(caplog, monkeypatch):
    # No deployment sets these (docs/configuration.md): the environment
    # leaves them alone, RpcConfig(...) still sets them, and whoever still
    # sets one is told, once, that it has no effect.
    from pyg_dist.rpc import config

    monkeypatch.setattr(config, "_told", set())
    env = {"PYG_DIST_MAX_IN_FLIGHT": "1", "PYG_DIST_MAX_QUEUED": "1",
           "PYG_DIST_INLINE_REPLY_BYTES": "1", "PYG_DIST_RETRY_BACKOFF": "9",
           "PYG_DIST_RETRY_BACKOFF_MAX": "9"}
    with caplog.at_level("WARNING", logger="pyg_dist.rpc.config"):
        assert RpcConfig.from_env(env) == RpcConfig()
        assert RpcConfig.from_env(env) == RpcConfig()
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 5 and all("no longer read" in m for m in told)
    assert any("PYG_DIST_MAX_IN_FLIGHT" in m and "RpcConfig(max_in_flight=" in m
               for m in told)
    assert RpcConfig(max_in_flight=8, max_queued=16).max_queued == 16


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


def test_byte_budgets_come_from_the_environment():
    env = {"PYG_DIST_CLIENT_RECEIVE_BUDGET": str(200 << 20),
           "PYG_DIST_SERVER_REPLY_BUDGET": str(1 << 30), "PYG_DIST_HANDSHAKE_TIMEOUT": "2.5"}
    config = RpcConfig.from_env(env)
    assert config.client_receive_budget == 200 << 20
    assert config.server_reply_budget == 1 << 30
    assert config.handshake_timeout == 2.5


@pytest.mark.parametrize("changes, names", [
    ({"client_receive_budget": 1 << 20, "max_message_bytes": 2 << 20},
     "client_receive_budget.*max_message_bytes"),
    ({"server_receive_budget": 64 << 20, "client_receive_budget": 128 << 20},
     "server_receive_budget.*client_receive_budget"),
    # A reply budget holds the largest answer with its working memory (4x).
    ({"client_reply_budget": 200 << 20, "max_reply_bytes": 64 << 20},
     "client_reply_budget.*4 x max_reply_bytes"),
])
def test_a_budget_below_the_limit_it_must_hold_is_refused(changes, names):
    with pytest.raises(RpcError, match=names):
        RpcConfig(**changes)

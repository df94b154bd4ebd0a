"""A running request revises its reply-budget charge (a ``sample_tree`` as
its hops come in: ``pyg_dist/server/own_part.py``), and the budget holds
what it was revised to until the reply is computed. A real ``RpcServer`` on
loopback, its usage read through ``ping``."""

from __future__ import annotations

import threading

from support.waiting import wait_until

from pyg_dist.rpc import RpcClient, RpcConfig, RpcServer
from pyg_dist.rpc.admission import running_charge
from pyg_dist.rpc.reply_budget import ReplyBudget

MIB = 1 << 20


def test_a_revision_replaces_the_charge_and_may_pass_the_budget():
    budget = ReplyBudget(client_budget=8 * MIB, server_budget=8 * MIB)
    assert budget.reserve(b"a", 6 * MIB) is None
    budget.revise(b"a", 6 * MIB, 2 * MIB)  # holds less than admitted
    assert budget.held(b"a") == budget.total == 2 * MIB
    assert budget.reserve(b"b", 5 * MIB) is None  # the room it gave back
    budget.revise(b"a", 2 * MIB, 9 * MIB)  # the work is under way: never refused
    assert budget.total == 14 * MIB and budget.peak == 14 * MIB
    assert budget.reserve(b"b", 1) is not None  # the next requests wait
    budget.settle(b"a", 9 * MIB, MIB)  # computed: its reply's bytes stay
    assert budget.held(b"a") == MIB and budget.total == 6 * MIB


def test_a_handler_revises_its_charge_while_it_runs():
    entered, leave = threading.Event(), threading.Event()
    seen = {}

    def grow(args, tensors):
        charge = running_charge()
        seen["admitted"] = charge.charged
        charge.revise(args["to"])
        entered.set()
        leave.wait(30)
        return {}, []

    def plain(args, tensors):
        seen["plain"] = running_charge()  # no estimator: charged nothing
        return {}, []

    config = RpcConfig(workers=2)
    with RpcServer({"grow": grow, "plain": plain}, config=config,
                   estimators={"grow": lambda args, tensors: 2 * MIB}, name="revising") as server, \
            RpcClient([server.endpoint], config) as client:
        future = client.call_async(0, "grow", {"to": 5 * MIB})
        try:
            assert entered.wait(30)
            usage = client.call(0, "ping", {"usage": True}).result["usage"]
            assert seen["admitted"] == 2 * MIB  # over inline_reply_bytes: a worker serves it
            assert usage["reply_bytes"] == 5 * MIB and usage["reply_bytes_peak"] >= 5 * MIB
        finally:
            leave.set()
        assert future.result(30).tensors == []
        wait_until(lambda: client.call(0, "ping", {"usage": True}).result["usage"]
                   ["reply_bytes"] == 0, 30, "the revised charge to be released")
        client.call(0, "plain")
        assert seen["plain"] is None

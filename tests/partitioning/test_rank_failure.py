"""What a rank makes of another rank's failure report (a store value: input
like any other) and of the errors gloo raises when a peer goes away
(``pyg_dist.partitioning.rank_failure``; the whole path runs between real
processes in ``test_cross_host_failure.py``)."""

from __future__ import annotations

import json

from pyg_dist.partitioning.rank_failure import _describe, _is_peer_loss, _parse_report


def test_a_report_is_read_and_bounded():
    report = _parse_report(json.dumps({"rank": 7, "error": "x" * 5000}).encode(), 1)
    # The rank is the key's, not what the value claims; the text is cut.
    assert report == {"rank": 1, "error": "x" * 2000}


def test_an_unreadable_report_still_names_the_rank():
    for raw in (b"\xff\xfe", b"[1, 2]", b"{}", b"not json"):
        assert _parse_report(raw, 2) == {"rank": 2, "error": "an unreadable failure report"}


def test_only_gloo_connection_errors_count_as_a_peer_gone():
    closed = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
                          "Connection closed by peer [127.0.0.1]:162")
    assert _is_peer_loss(closed)
    assert not _is_peer_loss(ValueError("Connection closed by peer"))
    assert not _is_peer_loss(RuntimeError("the partitioner failed"))


def test_signals_are_described_by_name():
    assert _describe(KeyboardInterrupt()) == "interrupted (SIGINT, Ctrl-C)"
    assert _describe(OSError(28, "No space left on device")) == \
        "OSError: [Errno 28] No space left on device"

"""Seeded generator of hostile requests for the fuzz test.

Every message is built from a valid request (``get``, ``sample``, ``meta``,
...) and then damaged in one of several ways: bit flips in the header or in a
tensor frame, random frame counts, wrong or unknown dtypes, shapes that lie
about the byte count, huge declared sizes, truncated headers, headers whose
fields have the wrong types, and plain random bytes. Separate families nest
one field of the header up to and past msgpack's 1,024 levels
(:meth:`RequestFuzzer.nested`, served inline or by a worker), send complete
messages of far too many frames (:class:`ManyFrameFuzzer`) and tiny requests
with huge answers (:class:`HugeAnswerFuzzer`). No frame is larger than the
server's request limit (ZeroMQ's ``MAXMSGSIZE``, which drops the connection
instead), so every message reaches the server and gets exactly one reply.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import msgpack
import torch
from support.hostile import NESTED_FIELDS, Raw, nested, nested_request, request_header

from pyg_dist.rpc import wire_format

Frames = list[bytes]


class RequestFuzzer:
    """Makes valid and damaged requests for one partition server.

    Args:
        owned: Global ids owned by the server's part (int64).
        max_message_bytes: The server's request limit.
        seed: Seed of the random generator.
    """

    def __init__(self, owned: torch.Tensor, max_message_bytes: int, seed: int = 0) -> None:
        self.owned = owned
        self.limit = max_message_bytes
        self.rng = random.Random(seed)
        self.mutators: list[Callable[[Frames], Frames]] = [
            self.flip_header_bits, self.flip_header_bits, self.flip_tensor_bits,
            self.random_frame_count, self.wrong_dtype, self.lying_shape,
            self.huge_size, self.truncate_header, self.wrong_field_types,
            self.random_bytes, self.random_msgpack,
        ]

    # Valid requests ########################################################

    def valid(self, req_id: int) -> Frames:
        """A well-formed request of a random op with small owned-id tensors."""
        rng = self.rng
        ids = self.owned[torch.randint(len(self.owned), (rng.randint(1, 16),),
                                       generator=torch.Generator().manual_seed(req_id))]
        op = rng.choice(["get", "get", "sample", "sample", "meta", "sizes", "ping",
                         "edge_index", "edge_ids", "get_groups", "sample_types",
                         "sample_tree"])
        cut = rng.randint(0, ids.numel())
        if op == "get_groups":
            # Two groups (the graph's one node type twice): ids split in two.
            op = "get"
            args = {"groups": [{"group": None, "attrs": ["x"]}, {"group": None, "attrs": ["y"]}],
                    "sizes": [cut, ids.numel() - cut]}
            tensors = [ids]
        elif op == "sample_types":
            # Two edge types (the graph's one twice): seeds split in two.
            op = "sample"
            args = {"edge_types": [None, None], "sizes": [cut, ids.numel() - cut],
                    "num_neighbors": [rng.choice([-1, 2, 5]), 2], "replace": False,
                    "seed": rng.randint(0, 100)}
            tensors = [ids]
        elif op == "sample_tree":
            # The whole batch, forwarded to the other part's server.
            args = {"edge_types": [None], "num_neighbors": [[rng.choice([-1, 2, 5]), 2]],
                    "seed_types": [None], "seed": rng.randint(0, 100),
                    "disjoint": rng.random() < 0.3}
            tensors = [ids]
        elif op == "get":
            args = {"groups": [{"attrs": rng.choice([["x"], ["y"], ["x", "y"]])}]}
            tensors = [ids]
        elif op == "sample":
            # Small fan-outs without replacement: even flipped bits cannot ask
            # for more neighbours than a node has.
            args = {"edge_types": [None], "num_neighbors": rng.choice([-1, 2, 5]),
                    "replace": False, "seed": rng.randint(0, 100)}
            tensors = [ids]
        else:
            args, tensors = {}, []
        frames = wire_format.encode_request(req_id, op, args, tensors)
        return [bytes(f) for f in frames]

    def hostile(self, req_id: int) -> Frames:
        """A valid request damaged by one randomly chosen mutator."""
        return self.rng.choice(self.mutators)(self.valid(req_id))

    # Mutators ##############################################################

    def _flip(self, raw: bytes, max_bits: int = 3) -> bytes:
        out = bytearray(raw)
        for _ in range(self.rng.randint(1, max_bits)):
            out[self.rng.randrange(len(out))] ^= 1 << self.rng.randrange(8)
        return bytes(out)

    def flip_header_bits(self, frames: Frames) -> Frames:
        # Two bits at most: three can turn a small fan-out into a uint32 one,
        # a valid request for a huge answer; those are test_bounds' subject.
        return [self._flip(frames[0], 2), *frames[1:]]

    def flip_tensor_bits(self, frames: Frames) -> Frames:
        if len(frames) < 2 or not frames[1]:
            return self.flip_header_bits(frames)
        return [frames[0], self._flip(frames[1]), *frames[2:]]

    def random_frame_count(self, frames: Frames) -> Frames:
        count = self.rng.choice([0, 1, 2, 3, 5, 20, 64, 65, 100])
        extra = [self.rng.randbytes(self.rng.randint(0, 64)) for _ in range(count)]
        return [frames[0], *extra] if self.rng.random() < 0.5 else [frames[0], *frames[1:], *extra]

    def _edit_header(self, frames: Frames, change: Callable[[dict], None]) -> Frames:
        head = msgpack.unpackb(frames[0], raw=False)
        change(head)
        return [msgpack.packb(head, use_bin_type=True), *frames[1:]]

    def wrong_dtype(self, frames: Frames) -> Frames:
        name = self.rng.choice(["float64", "float32", "uint8", "bool", "complex64", "object",
                                "pickle", "", "int64\0", 7, None])

        def change(head: dict) -> None:
            head["tensors"] = [[name, spec[1]] for spec in head.get("tensors", [])] \
                or [[name, [4]]]
        return self._edit_header(frames, change)

    def lying_shape(self, frames: Frames) -> Frames:
        shape = self.rng.choice([[0], [1], [3, 3], [-1], [8, -8], [1.5], [True], ["8"],
                                 [1] * 9, [None], [], [2, 4, 1], [7]])

        def change(head: dict) -> None:
            head["tensors"] = [[spec[0], shape] for spec in head.get("tensors", [])] \
                or [["int64", shape]]
        return self._edit_header(frames, change)

    def huge_size(self, frames: Frames) -> Frames:
        choice = self.rng.randrange(4)
        if choice == 0:  # a header that declares a gigantic tensor
            spec = ["float64", [self.rng.choice([1 << 40, 1 << 62, (1 << 64) - 1])]]
            return self._edit_header(frames, lambda h: h.update(tensors=[spec]))
        if choice == 1:  # a header declaring many gigantic dimensions
            spec = ["int64", [1 << 62] * 8]
            return self._edit_header(frames, lambda h: h.update(tensors=[spec]))
        if choice == 2:  # a huge id / op string / args
            return self._edit_header(frames, lambda h: h.update(
                id=1 << 63, op="x" * 10_000, args={"k" * 100: list(range(1000))}))
        # Real frames just over the request limit together (refused by its
        # size); each stays within ZeroMQ's MAXMSGSIZE (the limit), beyond
        # which libzmq drops the connection instead of the server replying.
        return [frames[0], bytes(self.limit // 2 + 8), bytes(self.limit // 2 + 8)]

    def truncate_header(self, frames: Frames) -> Frames:
        head = frames[0]
        return [head[: self.rng.randrange(len(head))], *frames[1:]]

    def wrong_field_types(self, frames: Frames) -> Frames:
        field = self.rng.choice(["version", "id", "op", "args", "tensors"])
        value = self.rng.choice([None, -1, "1", 1.5, [], {}, b"\x80\x04", True, {"a": [1]},
                                 [[["int64", [1]]]], 1 << 64 - 1])
        return self._edit_header(frames, lambda h: h.update({field: value}))

    def random_bytes(self, frames: Frames) -> Frames:
        return [self.rng.randbytes(self.rng.randint(0, 256))
                for _ in range(self.rng.randint(1, 4))]

    def random_msgpack(self, frames: Frames) -> Frames:
        def value(depth: int = 0):
            kind = self.rng.randrange(7 if depth < 12 else 4)
            if kind == 0:
                return self.rng.randint(-(1 << 63), (1 << 64) - 1)
            if kind == 1:
                return self.rng.random()
            if kind == 2:
                return self.rng.randbytes(self.rng.randint(0, 16)).decode("latin-1")
            if kind == 3:
                return None
            if kind == 4:
                return [value(depth + 1) for _ in range(self.rng.randint(0, 3))]
            if kind == 5:
                return msgpack.ExtType(self.rng.randint(0, 127), self.rng.randbytes(4))
            return {str(i): value(depth + 1) for i in range(self.rng.randint(0, 3))}
        head = {"version": wire_format.PROTOCOL_VERSION, "id": self.rng.randint(0, 100),
                "op": "get", "args": value(), "tensors": value()}
        return [msgpack.packb(head, use_bin_type=True), *frames[1:]]

    # Nested headers (a family of their own) ##################################

    NESTED_DEPTHS = (8, 9, 17, 500, 999, 1000, 1001, 1015, 1023, 1024, 1025, 4000)

    def nested(self, req_id: int) -> Frames:
        """A valid request whose header has one field (id, op, version, a
        tensor spec, dtype or shape, args, an unknown key) replaced by a
        value nested up to a few thousand levels deep, a quarter of them
        padded past the inline limit so a worker decodes them."""
        frames = self.valid(req_id)
        head = msgpack.unpackb(frames[0], raw=False)
        field = self.rng.choice(list(NESTED_FIELDS))
        leaf = self.rng.choice([1, "x", None, {}, [], 1.5])
        deep = nested(self.rng.choice(self.NESTED_DEPTHS), leaf)
        args = head["args"]
        if self.rng.random() < 0.25:
            args = {**args, "pad": "p" * (20 << 10)}  # over the 16 KiB served inline
        if field == "args":  # keep the real arguments beside the deep one
            header = request_header(head["id"], head["op"], Raw(deep_args(args, deep)),
                                    head["tensors"])
            return [header, *frames[1:]]
        hostile = nested_request(field, deep, head["id"], head["op"], args, head["tensors"])
        # The request's own tensor frames; a hostile spec of a request that
        # has none comes with one, so the spec itself is looked at.
        return hostile[:1] + (frames[1:] or hostile[1:])


def deep_args(args: dict, deep: Raw) -> bytes:
    """``args`` with one more key, ``deep``, as raw msgpack."""
    out = bytearray(b"\xdf" + (len(args) + 1).to_bytes(4, "big"))
    for key, value in args.items():
        out += msgpack.packb(key) + msgpack.packb(value, use_bin_type=True)
    return bytes(out + msgpack.packb("deep") + deep.data)


# Families beyond one damaged request ########################################


class ManyFrameFuzzer:
    """Complete messages with far more frames than a request may have.

    libzmq keeps 64 bytes per frame besides its payload, and the protocol
    allows at most 64 tensor frames: these messages (65 to 5,000 frames of
    0 to 16 bytes, with headers declaring none, some or all of them) must
    each get one error reply, at a bounded cost.

    Args:
        valid: Makes a valid request for an id (e.g. :meth:`RequestFuzzer.valid`).
        seed: Seed of the random generator.
    """

    COUNTS = (65, 66, 100, 257, 1000, 5000)

    def __init__(self, valid: Callable[[int], Frames], seed: int = 0) -> None:
        self.valid = valid
        self.rng = random.Random(seed)

    def message(self, req_id: int) -> Frames:
        """A valid request's header followed by many small frames."""
        rng = self.rng
        count = rng.choice(self.COUNTS)
        frames = [rng.randbytes(rng.randint(0, 16)) for _ in range(count)]
        head = msgpack.unpackb(self.valid(req_id)[0], raw=False)
        declared = rng.choice([0, 1, 64, count])
        head["tensors"] = [["uint8", [len(f)]] for f in frames[:declared]]
        return [msgpack.packb(head, use_bin_type=True), *frames]


class HugeAnswerFuzzer:
    """Tiny requests with huge answers: ``sample`` with replacement and fan-outs
    from 2**10 to 2**31 on one to four seeds (answers of 16 KiB up to past the
    reply limit), and ``get`` of up to 2,000 rows.

    Args:
        seeds: Owned ids with at least one neighbour (replacement then
            really draws ``k`` neighbours each).
        seed: Seed of the random generator.
    """

    FAN_OUTS = (1 << 10, 1 << 14, 1 << 18, 1 << 24, 1 << 31)

    def __init__(self, seeds: torch.Tensor, seed: int = 0) -> None:
        self.seeds = seeds
        self.rng = random.Random(seed)

    def request(self, req_id: int) -> Frames:
        """One encoded request (its reply may be an answer or a refusal)."""
        rng = self.rng
        pick = torch.tensor([rng.randrange(self.seeds.numel())
                             for _ in range(rng.randint(1, 4))])
        ids = self.seeds[pick]
        draw = rng.random()
        if draw < 0.25:
            rows = self.seeds[torch.arange(rng.choice([1, 100, 2000])) % self.seeds.numel()]
            frames = wire_format.encode_request(req_id, "get", {"groups": [{"attrs": ["x"]}]},
                                                [rows])
        elif draw < 0.4:
            # A whole batch of hops with replacement: the answer compounds
            # per hop, and the peer's answers are the coordinator's memory.
            args = {"edge_types": [None], "seed_types": [None],
                    "num_neighbors": [[rng.choice(self.FAN_OUTS), rng.choice(self.FAN_OUTS)]],
                    "replace": True, "seed": rng.randint(0, 1 << 20)}
            frames = wire_format.encode_request(req_id, "sample_tree", args, [ids])
        else:
            args = {"edge_types": [None], "num_neighbors": rng.choice(self.FAN_OUTS),
                    "replace": True, "seed": rng.randint(0, 1 << 20)}
            frames = wire_format.encode_request(req_id, "sample", args, [ids])
        return [bytes(f) for f in frames]

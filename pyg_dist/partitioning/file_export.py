"""Writing a graph into the file layout ``pyg-dist partition --from`` reads
(``DIR/edges/*.parquet``, ``DIR/edges/NAME.npy``, ``DIR/nodes/NAME.npy``; by
type ``DIR/edges/SRC__REL__DST/``, ``DIR/nodes/TYPE/`` and ``graph.json``):
from a PyG ``Data`` (:func:`write_data_files`), a ``HeteroData``
(:func:`write_hetero_data_files`) or an OGB-style raw directory
(:func:`write_ogb_files`), the latter in bounded memory.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from pyg_dist.errors import InvalidPartitionArgumentError

logger = logging.getLogger(__name__)

ROW_GROUP_EDGES = 1 << 20
"""Rows per parquet row group: pyarrow decodes a whole group at a time, so
this bounds what a reader holds (about 16 bytes an edge)."""


def _edge_writer(out: Path, name: str = "part-00000.parquet", subdir: str = "") -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = out / "edges" / subdir
    directory.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
    return pq.ParquetWriter(directory / name, schema)


def _write_edges(writer: Any, src: np.ndarray, dst: np.ndarray) -> None:
    import pyarrow as pa

    for s in range(0, len(src), ROW_GROUP_EDGES):
        writer.write_table(pa.table({"src": src[s:s + ROW_GROUP_EDGES].astype(np.int64),
                                     "dst": dst[s:s + ROW_GROUP_EDGES].astype(np.int64)}))


def write_data_files(data: Any, out: Union[str, os.PathLike]) -> Path:
    """Writes a homogeneous PyG ``Data`` into the file layout.

    Node-level tensors (as :func:`~pyg_dist.partitioning.inputs.split_attributes`
    sorts them) become ``nodes/NAME.npy``, edge-level tensors
    ``edges/NAME.npy``; edges become ``edges/part-00000.parquet`` in
    ``edge_index`` column order, so edge ids are kept.

    Raises:
        InvalidPartitionArgumentError: ``data`` is not a valid ``Data``, an
            attribute has a dtype numpy lacks, or ``out`` is not empty.
    """
    from pyg_dist.partitioning.inputs import split_attributes

    graph = split_attributes(data)
    out = _fresh_dir(out)
    _save_arrays(out / "nodes", graph.node_features[None], "node")
    _write_edge_type(out, "", graph.edge_index[None].numpy(), graph.edge_features[None])
    return out


def write_hetero_data_files(data: Any, out: Union[str, os.PathLike]) -> Path:
    """Writes a PyG ``HeteroData`` into the layout by type: per node type
    ``nodes/TYPE/NAME.npy``, per edge type ``edges/SRC__REL__DST/`` (a
    parquet file in ``edge_index`` column order and ``NAME.npy`` per edge
    attribute), and ``graph.json`` with the types in the graph's order and
    every node count (a type may have no attribute).

    Raises:
        InvalidPartitionArgumentError: ``data`` is not a valid
            ``HeteroData`` (as :func:`~pyg_dist.partitioning.inputs.split_hetero_attributes`
            checks it), an attribute has a dtype numpy lacks, or ``out`` is
            not empty.
    """
    from pyg_dist.partitioning.inputs import split_hetero_attributes

    graph = split_hetero_attributes(data)
    out = _fresh_dir(out)
    for node_type in graph.node_types:
        _save_arrays(out / "nodes" / node_type, graph.node_features[node_type], "node")
    for edge_type in graph.edge_types:
        _write_edge_type(out, "__".join(edge_type), graph.edge_index[edge_type].numpy(),
                         graph.edge_features[edge_type])
    (out / "graph.json").write_text(json.dumps({
        "node_types": graph.num_nodes,
        "edge_types": [list(et) for et in graph.edge_types]}, indent=1))
    return out


def _write_edge_type(out: Path, subdir: str, edge_index: np.ndarray,
                     features: dict[str, Any]) -> None:
    writer = _edge_writer(out, subdir=subdir)
    try:
        _write_edges(writer, edge_index[0], edge_index[1])
    finally:
        writer.close()
    _save_arrays(out / "edges" / subdir, features, "edge")


def _save_arrays(directory: Path, tensors: dict[str, Any], what: str) -> None:
    """Every tensor as ``directory/NAME.npy``."""
    for name, value in tensors.items():
        try:
            array = value.detach().cpu().contiguous().numpy()
        except TypeError as exc:
            raise InvalidPartitionArgumentError(
                f"{what} attribute {name!r} has dtype {value.dtype}, which .npy cannot "
                f"hold; convert it first") from exc
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / f"{name}.npy", array)


def _fresh_dir(out: Union[str, os.PathLike]) -> Path:
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidPartitionArgumentError(f"{out} exists and is not an empty directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _csv_blocks(path: Path, names: list[str], types: dict[str, Any],
                block_bytes: int = 16 << 20) -> Iterator[Any]:
    """Record batches of a headerless (optionally gzipped) CSV file."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    stream = pa.input_stream(str(path), compression="detect")
    reader = pcsv.open_csv(stream, read_options=pcsv.ReadOptions(
        column_names=names, block_size=block_bytes),
        convert_options=pcsv.ConvertOptions(column_types=types))
    try:
        yield from reader
    finally:
        stream.close()


def _find(raw: Path, stem: str) -> Optional[Path]:
    for suffix in (".csv.gz", ".csv"):
        if (raw / f"{stem}{suffix}").is_file():
            return raw / f"{stem}{suffix}"
    return None


class _NpyAppender:
    """A ``.npy`` file of known shape written row block by row block."""

    def __init__(self, path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.path, self.dtype, self.shape, self.rows = path, np.dtype(dtype), shape, 0
        self._f = open(path, "wb")
        np.lib.format.write_array_header_2_0(self._f, {
            "descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
            "shape": shape})

    def append(self, block: np.ndarray) -> None:
        self._f.write(np.ascontiguousarray(block, dtype=self.dtype).tobytes())
        self.rows += len(block)

    def close(self) -> None:
        self._f.close()
        if self.rows != self.shape[0]:
            raise InvalidPartitionArgumentError(
                f"{self.path}: wrote {self.rows} rows, expected {self.shape[0]} (the node "
                f"count of num-node-list); the OGB directory is inconsistent")


def write_ogb_files(ogb_dir: Union[str, os.PathLike], out: Union[str, os.PathLike]) -> Path:
    """Converts an OGB node-property dataset's CSV layout (``raw/edge.csv.gz``,
    ``raw/num-node-list.csv.gz``, optional ``raw/node-feat.csv.gz``,
    ``raw/node-label.csv.gz`` and ``split/*/{train,valid,test}.csv.gz``)
    into the file layout, reading every CSV in blocks.

    Features become ``x.npy`` (float32), labels ``y.npy`` (int64; a missing
    label, NaN in OGB, becomes -1), splits ``train_mask.npy``,
    ``val_mask.npy``, ``test_mask.npy``.

    Raises:
        InvalidPartitionArgumentError: a required file is missing or the
            files disagree.
    """
    import pyarrow as pa

    ogb_dir, out = Path(ogb_dir), _fresh_dir(out)
    raw = ogb_dir / "raw"
    edges, counts = _find(raw, "edge"), _find(raw, "num-node-list")
    if edges is None or counts is None:
        raise InvalidPartitionArgumentError(
            f"{ogb_dir} is not an OGB node-property directory: raw/edge.csv.gz and "
            f"raw/num-node-list.csv.gz are needed")
    num_nodes = int(next(_csv_blocks(counts, ["n"], {"n": pa.int64()})).column(0)[0].as_py())
    writer = _edge_writer(out)
    try:
        for batch in _csv_blocks(edges, ["src", "dst"], {"src": pa.int64(), "dst": pa.int64()}):
            _write_edges(writer, batch.column(0).to_numpy(), batch.column(1).to_numpy())
    finally:
        writer.close()
    (out / "nodes").mkdir()
    _convert_features(raw, out, num_nodes)
    _convert_splits(ogb_dir, out, num_nodes)
    return out


def _convert_features(raw: Path, out: Path, num_nodes: int) -> None:
    import pyarrow as pa

    feat = _find(raw, "node-feat")
    if feat is not None:
        appender = None
        try:
            for block in _feature_blocks(feat):
                if appender is None:  # the width comes from the first block
                    appender = _NpyAppender(out / "nodes" / "x.npy", np.float32,
                                            (num_nodes, block.shape[1]))
                appender.append(block)
        finally:
            if appender is not None:
                appender.close()
    label = _find(raw, "node-label")
    if label is not None:
        appender = _NpyAppender(out / "nodes" / "y.npy", np.int64, (num_nodes,))
        for batch in _csv_blocks(label, ["y"], {"y": pa.float64()}):
            y = batch.column(0).to_numpy(zero_copy_only=False)
            appender.append(np.where(np.isnan(y), -1, y).astype(np.int64))
        appender.close()


def _feature_blocks(path: Path) -> Iterator[np.ndarray]:
    """Blocks of a headerless float CSV as float32 matrices."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    stream = pa.input_stream(str(path), compression="detect")
    reader = pcsv.open_csv(stream, read_options=pcsv.ReadOptions(
        autogenerate_column_names=True, block_size=16 << 20))
    try:
        for batch in reader:
            yield np.stack([c.to_numpy(zero_copy_only=False).astype(np.float32)
                            for c in batch.columns], axis=1)
    finally:
        stream.close()


def _convert_splits(ogb_dir: Path, out: Path, num_nodes: int) -> None:
    import pyarrow as pa

    splits = sorted(p for p in (ogb_dir / "split").glob("*") if p.is_dir()) \
        if (ogb_dir / "split").is_dir() else []
    if not splits:
        return
    for stem, name in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        path = _find(splits[0], stem)
        if path is None:
            continue
        mask = np.zeros(num_nodes, dtype=np.bool_)
        for batch in _csv_blocks(path, ["id"], {"id": pa.int64()}):
            ids = batch.column(0).to_numpy()
            if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
                raise InvalidPartitionArgumentError(f"{path} holds node ids outside "
                                                    f"[0, {num_nodes})")
            mask[ids] = True
        np.save(out / "nodes" / f"{name}.npy", mask)

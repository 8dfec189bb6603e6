"""The shards' Parquet schema: the built-in columns, one field per side column after them,
and the column encodings the writers use. Part of the slab format (`slabs.format`, which
re-exports what FORMAT.md and DESIGN.md name there); FORMAT.md lists the columns.
"""
from __future__ import annotations

import pyarrow as pa

from packtool.side import SideColumn, check_side_columns

# 2: optional per-token side columns (manifest `side_columns`, one Parquet column each, after
# the built-in ones). Version 1 outputs are version 2 outputs without side columns: still read.
SCHEMA_VERSION = 2


SCHEMA = pa.schema([
    ("input_ids", pa.list_(pa.int32())),
    ("loss_mask", pa.list_(pa.uint8())),
    ("seq_lens", pa.list_(pa.int32())),
    ("cu_seqlens", pa.list_(pa.int32())),
    ("cu_seqlens_padded", pa.list_(pa.int32())),
    ("cp_offsets", pa.list_(pa.int32())),
    ("source_index", pa.list_(pa.int64())),
    ("chunk_index", pa.list_(pa.int32())),
    ("source_offset", pa.list_(pa.int64())),
    ("num_tokens", pa.int32()),
    ("num_loss_tokens", pa.int32()),
    ("layout_pad", pa.int32()),
    ("tail_pad", pa.int32()),
    ("fill_pad", pa.int32()),
    ("singleton", pa.bool_()),
    ("slab_index", pa.int64()),
    ("dp_rank", pa.int32()),
    ("step", pa.int32()),
    ("microbatch", pa.int32()),
], metadata={b"packtool.schema_version": str(SCHEMA_VERSION).encode()})


def side_field(c: SideColumn) -> pa.Field:
    """A side column's Parquet field: list<dtype> (width 1) or list<fixed_size_list<dtype, K>>,
    one entry per physical token, like input_ids."""
    t = pa.from_numpy_dtype(c.np_dtype)
    return pa.field(c.name, pa.list_(t if c.width == 1 else pa.list_(t, c.width)))


def slab_schema(side=()) -> pa.Schema:
    """The shards' schema: `SCHEMA`, then one field per side column in manifest order."""
    side = check_side_columns(side)
    if not side:
        return SCHEMA
    return pa.schema(list(SCHEMA) + [side_field(c) for c in side], metadata=SCHEMA.metadata)


def side_encoding(side=()) -> dict:
    """`TOKEN_ENCODING` plus the side columns' values: one value per token byte-stream-split
    too (log-probs' exponent bytes are near constant, as token ids' high bytes are); K-wide
    rows PLAIN: a row is mostly the fill, runs that zstd takes whole in plain order but cuts
    into K-byte pieces split (20-wide support rows: ~15% smaller and a fifth less encoding
    CPU than split, BENCHMARKS.md, side columns)."""
    enc = dict(TOKEN_ENCODING)
    for c in check_side_columns(side):
        if c.width == 1:
            enc[f"{c.name}.list.element"] = "BYTE_STREAM_SPLIT"
        else:
            enc[f"{c.name}.list.element.list.element"] = "PLAIN"
    return enc


# Parquet BYTE_STREAM_SPLIT for integers: readers need Parquet format 2.11 (pyarrow >= 17)
TOKEN_ENCODING = {"input_ids.list.element": "BYTE_STREAM_SPLIT",
                  "loss_mask.list.element": "BYTE_STREAM_SPLIT"}

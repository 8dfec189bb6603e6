"""The shards' Parquet schema: the built-in columns, one field per side column after them,
and the column encodings the writers use. Part of the slab format (`slabs.format`, which
re-exports what FORMAT.md and DESIGN.md name there); FORMAT.md lists the columns.
"""
from __future__ import annotations

import json

import pyarrow as pa

from packtool.side import SideColumn, check_side_columns

# 2: optional per-token side columns (manifest `side_columns`, one Parquet column each, after
# the built-in ones). Version 1 outputs are refused by every reader (slabs.format.OLD_VERSION).
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


# a side column's field carries its manifest entry: the kind (and the fill) are no part of the
# Arrow type, so that a manifest re-declaring a column shows against the shard it describes
SIDE_RECORD = b"packtool.side_column"


def repeated_column(schema: pa.Schema) -> str | None:
    """A name the shard's schema holds more than once (Parquet allows it: a recomputed column
    appended under its own name), said as what it is; None when every name is one field. Asked
    before any column is looked up by name, where pyarrow answers a repeated name as absent
    ("column is missing" of a column the user sees twice) or with its bare KeyError (S46B-6).
    Every reader of a shard's footer asks this (slabs.check, verify)."""
    names = schema.names
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is None:
        return None
    return (f"column {twice!r} appears {names.count(twice)} times in the shard (one field per name); drop "
            f"the extra one, or re-run `packtool pack`")


def side_field(c: SideColumn) -> pa.Field:
    """A side column's Parquet field: list<dtype> (one value per token) or
    list<fixed_size_list<dtype, K>> (a K-wide row, K >= 1), one entry per physical token, like
    input_ids; its field metadata is `c`'s manifest entry."""
    t = pa.from_numpy_dtype(c.np_dtype)
    return pa.field(c.name, pa.list_(pa.list_(t, c.width) if c.row else t),
                    metadata={SIDE_RECORD: json.dumps(c.to_dict(), sort_keys=True).encode()})


def side_field_problem(field: pa.Field | None, c: SideColumn) -> str | None:
    """How a shard's field differs from the manifest's entry `c` for it, or None: the column
    present, of the type `c` gives (dtype, width), and the entry the writer recorded in its
    metadata (name, dtype, width, fill, kind) the manifest's. A field without the record (a
    shard written before packtool recorded it) is held to its type alone. Every reader of a
    shard's footer asks this (slabs.check, verify); FORMAT.md, "Side columns"."""
    if field is None:
        return f"side column {c.name!r} is declared in the manifest but missing from the shard"
    want = side_field(c)
    if field.type != want.type:
        return f"side column {c.name!r} is {field.type}, the manifest's entry gives {want.type}"
    record = (field.metadata or {}).get(SIDE_RECORD)
    if record is None:
        return None
    try:
        written = json.loads(record)
    except (ValueError, RecursionError):  # a hand-made record nested too deeply: damaged, not a crash
        written = None
    entry = c.to_dict()
    if not isinstance(written, dict):
        return f"side column {c.name!r} carries a damaged {SIDE_RECORD.decode()} record"
    diff = [k for k in entry if written.get(k) != entry[k]]
    if diff or set(written) != set(entry):
        k = (diff or sorted(set(written) ^ set(entry)))[0]
        return (f"side column {c.name!r} is declared with {k} {entry.get(k)!r} in the manifest, the shard's "
                f"column was written with {k} {written.get(k)!r}")
    return None


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
        if not c.row:
            enc[f"{c.name}.list.element"] = "BYTE_STREAM_SPLIT"
        else:
            enc[f"{c.name}.list.element.list.element"] = "PLAIN"
    return enc


# Parquet BYTE_STREAM_SPLIT for integers: readers need Parquet format 2.11 (pyarrow >= 17)
TOKEN_ENCODING = {"input_ids.list.element": "BYTE_STREAM_SPLIT",
                  "loss_mask.list.element": "BYTE_STREAM_SPLIT"}

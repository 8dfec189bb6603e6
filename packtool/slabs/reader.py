"""Read a packtool slab directory (FORMAT.md) with bounded memory, through `slabs.format`.

Nothing is handed out unchecked (`slabs.check`): `SlabIndex.build` runs the open-time checks
(shard set, sizes, schemas, row and token counts); `SlabReader` hashes a shard before its
first row is used and checks every row group it decodes.

`SlabIndex` holds only the per-slab scalars (a few ints per slab) for the whole output,
read column by column, row group by row group. Token data are read one row group at a time
on demand (`SlabReader`, a small LRU of decoded row groups) and sliced per row as numpy
views of the Arrow buffers (`packtool.arrays`: pyarrow's to_numpy would import pandas into
every reader's process): no per-token Python objects. Side columns the manifest declares
(FORMAT.md "Side columns") are read with the tokens, [T] or [T, K] per slab.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.arrays import list_parts, np_of
from packtool.free_memory import decode_out_of_memory
from packtool.params import position
from packtool.side import SideColumn
from packtool.slabs.check import (check_checksum, check_counts, check_coverage, check_group, check_nulls,
                                  check_output, check_segment_counts, check_side_lengths)
from packtool.slabs.check_said import shard_gone
from packtool.slabs.check_side import check_side_nonfinite
from packtool.slabs.format import FormatError, SlabManifest
from packtool.storage import store_failure

SCALARS = ("num_tokens", "num_loss_tokens", "layout_pad", "tail_pad", "fill_pad", "dp_rank",
           "step", "microbatch")
# read at open for the checks only (coverage, segment counts, check_group's n_seg)
SEGMENTS = ("source_index", "chunk_index")
# read per row group; tail_pad and fill_pad are the index's, read at open with the scalars
LISTS = ("input_ids", "loss_mask", "seq_lens", "cu_seqlens", "cu_seqlens_padded")
# the format's columns no reader uses, read for the checks alone (nulls, and their rules: a few
# bytes per segment, like SEGMENTS), so that a slab that breaks FORMAT.md anywhere is refused
NULLS_ONLY = ("cp_offsets", "source_offset", "slab_index", "singleton")
# of NULLS_ONLY, kept for check_group: the flag is held to the capacity and overflow rules
FLAGS = ("singleton",)
# of NULLS_ONLY, read with each row group rather than at open: cp_offsets is held to the group's
# cu_seqlens_padded (// cp), which the open scan does not read
WITH_GROUP = ("cp_offsets",)
# of NULLS_ONLY, whose per-segment values (and entries per slab) the open checks hold
SEGMENT_VALUES = ("source_offset",)
# SEGMENTS and NULLS_ONLY serve the checks alone: bench/read_check.py empties both when it
# switches the checks off, so that "off" reads only what a row needs


@dataclass(frozen=True)
class SlabIndex:
    """Scalars of every slab, in on-disk order. `where[i] = (shard, row_group, row)`."""

    shard: np.ndarray
    row_group: np.ndarray
    row: np.ndarray
    num_tokens: np.ndarray
    num_loss_tokens: np.ndarray
    stripped: np.ndarray  # tokens without tail pad and fill: sum of round_up(len, s)
    n_seg: np.ndarray  # segments: source_index's entries, which seq_lens must match (check_group)
    dp_rank: np.ndarray
    step: np.ndarray
    microbatch: np.ndarray
    # decoded once, at open: check_group holds them to the layout, `SlabRow` hands them out
    tail_pad: np.ndarray
    fill_pad: np.ndarray
    singleton: np.ndarray  # read at open for check_group alone (all False when the checks are off)
    # whether the slab's last segment is a fixed-length fill by its source_index (-1), to which
    # check_group holds its seq_lens (0 there and nowhere else); all False with the checks off
    fill_seg: np.ndarray

    def __len__(self) -> int:
        return int(self.shard.size)

    @classmethod
    def build(cls, manifest: SlabManifest) -> "SlabIndex":
        with manifest.reading():
            return cls._checked(manifest, _scan(manifest))

    @classmethod
    def _checked(cls, manifest: SlabManifest, cat: dict[str, np.ndarray]) -> "SlabIndex":
        """The open-time checks on what `_scan` read, then the index."""
        check_segment_counts(manifest, cat)
        check_coverage(manifest, cat)
        check_counts(manifest, cat)
        return cls(shard=cat["shard"], row_group=cat["row_group"], row=cat["row"],
                   num_tokens=cat["num_tokens"], num_loss_tokens=cat["num_loss_tokens"],
                   stripped=cat["num_tokens"] + cat["layout_pad"], n_seg=cat["n_seg"], dp_rank=cat["dp_rank"],
                   step=cat["step"], microbatch=cat["microbatch"], tail_pad=cat["tail_pad"],
                   fill_pad=cat["fill_pad"], singleton=cat.get("singleton", np.zeros(cat["shard"].size, bool)),
                   fill_seg=_fill_seg(cat))


def _fill_seg(cat: dict[str, np.ndarray]) -> np.ndarray:
    """Per slab, whether its last source_index entry is -1 (none read, the bench's checks off: all False)."""
    src = cat.get("source_index")
    if src is None or not src.size:
        return np.zeros(cat["shard"].size, bool)
    last = cat["segments"][1:] - 1
    return (cat["n_seg"] > 0) & (src[np.maximum(last, 0)] < 0)


def _scan(manifest: SlabManifest, extra: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """After the output checks, every slab's scalars (and the `extra` scalar columns) and the
    values of its segment columns, with `segments`: per-slab offsets into them. On-disk order."""
    check_output(manifest)
    scalars = (*SCALARS, *extra)
    lists = (*SEGMENTS, *(c for c in SEGMENT_VALUES if c in NULLS_ONLY))  # NULLS_ONLY: () with the checks off
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("shard", "row_group", "row", *scalars, *lists,
                                                          *(f"{c}:count" for c in lists))}
    at_open = [c for c in NULLS_ONLY if c not in scalars and c not in WITH_GROUP]
    for si in range(len(manifest.shards)):
        pf = _open(manifest, si)
        for rg in range(pf.num_row_groups):
            t = _read_group(pf, rg, [*scalars, *SEGMENTS, *at_open], manifest.shard_path(si))
            n = t.num_rows
            for c in lists:
                arr = t.column(c).combine_chunks()
                values, offsets = list_parts(arr)
                parts[c].append(values)
                parts[f"{c}:count"].append(np.diff(offsets))
            parts["shard"].append(np.full(n, si, np.int32))
            parts["row_group"].append(np.full(n, rg, np.int32))
            parts["row"].append(np.arange(n, dtype=np.int32))
            for c in scalars:
                parts[c].append(np_of(t.column(c)).astype(np.int64))
            for c in FLAGS:
                if c in t.column_names and c not in scalars:  # unread when the bench switches the checks off
                    parts.setdefault(c, []).append(np_of(t.column(c)).astype(bool))
            if "slab_index" in t.column_names and "slab_index" not in scalars:  # for check_counts' plan rules
                parts.setdefault("slab_index", []).append(np_of(t.column("slab_index")))
    cat = {k: (np.concatenate(v) if v else np.zeros(0, np.int64)) for k, v in parts.items()}
    # entries per slab, held to seq_lens' count; none when the bench reads no SEGMENTS (checks off)
    none = np.zeros(cat["shard"].size, np.int64)
    cat["n_seg"] = cat.pop("source_index:count", none).astype(np.int64)
    cat["chunk_counts"] = cat.pop("chunk_index:count", none).astype(np.int64)
    for c in SEGMENT_VALUES:
        if f"{c}:count" in cat:
            cat[f"{c}_counts"] = cat.pop(f"{c}:count").astype(np.int64)
    cat["segments"] = np.concatenate(([0], np.cumsum(cat["n_seg"]))).astype(np.int64)
    return cat


def _open(manifest: SlabManifest, i: int) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(manifest.open_shard(i))
    except FileNotFoundError:  # gone since the open checks: a store output replaced meanwhile
        raise shard_gone(manifest, i) from None
    except (OSError, MemoryError) as e:  # a store that stopped answering, or no memory for the footer: never "damaged"
        raise store_failure(e, manifest.shard_path(i), "footer") or e from None


def _read_group(pf: pq.ParquetFile, rg: int, columns: list[str], path: str) -> pa.Table:
    try:
        t = pf.read_row_group(rg, columns=columns)
    except (OSError, pa.ArrowException) as e:  # damaged pages under a valid footer, a store gone, no memory
        if (gone := store_failure(e, path, f"row group {rg}")) is not None:
            raise gone from None
        raise FormatError(f"{path} row group {rg}: cannot be decoded ({' '.join(str(e).split())[:160]}); "
                          f"run `packtool verify` on the output") from None
    check_nulls(path, rg, t)
    return t


@dataclass
class SlabRow:
    """One slab's arrays (numpy views, valid while its row group is cached)."""

    input_ids: np.ndarray  # int32[T]
    loss_mask: np.ndarray  # uint8[T]
    seq_lens: np.ndarray  # int32[n_seg]
    seg_padded: np.ndarray  # int64[n_seg]
    tail_pad: int
    fill_pad: int
    side: dict = field(default_factory=dict)  # name -> [T] or [T, K], token-aligned as stored


def _list_column(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    offsets = np_of(arr.offsets).astype(np.int64)
    values = np_of(arr.values)
    return values, offsets


def _side_column(col: pa.ChunkedArray, c: SideColumn, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(values [n] or [n, K], offsets per slab in tokens) of one side column of row group `where`.
    The open checks held the footer's type to the manifest's; the decoded values are held again."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    offsets = np_of(arr.offsets).astype(np.int64)
    inner = arr.values
    if c.row:
        if not pa.types.is_fixed_size_list(inner.type) or inner.type.list_size != c.width:
            raise FormatError(f"{where}: side column {c.name!r} is {arr.type}, the manifest says {c.width} "
                              f"{c.dtype} per token; run `packtool verify` on the output")
        w = c.width  # the values cut by hand, a sliced array's offset respected (flatten() loads compute)
        inner = inner.values.slice(inner.offset * w, len(inner) * w)
    values = np_of(inner)
    if values.dtype != c.np_dtype:
        raise FormatError(f"{where}: side column {c.name!r} holds {values.dtype}, the manifest says {c.dtype}; "
                          f"run `packtool verify` on the output")
    return values.reshape(-1, *c.row_shape), offsets


class SlabReader:
    """Random access to slabs by index, decoding at most `cache` row groups at a time."""

    def __init__(self, manifest: SlabManifest, index: SlabIndex, cache: int = 2):
        self.manifest = manifest
        self.index = index
        # first slab of every (shard, row group): the index is in on-disk order
        new = np.ones(len(index), bool)
        new[1:] = (np.diff(index.shard) != 0) | (np.diff(index.row_group) != 0)
        self._first = {(int(index.shard[i]), int(index.row_group[i])): int(i) for i in np.flatnonzero(new)}
        self._files: dict[int, pq.ParquetFile] = {}
        self._cache: OrderedDict[tuple[int, int], dict] = OrderedDict()
        self._cache_size = max(1, cache)
        # one reader may serve several threads (CP ranks simulated as threads, a threaded
        # loader): a pyarrow ParquetFile and this LRU are not safe to share unlocked
        # ("ReadRangeCache did not find matching cache entry" under load)
        self._lock = threading.Lock()
        self.side_columns: tuple[SideColumn, ...] = manifest.side_columns
        self._ids_below: tuple[int, str] | None = None  # bound_ids
        # per decoded (shard, row group), its float side columns' non-zero (NaN, +-inf) counts:
        # each group counted once however often it is decoded again (check_side_nonfinite)
        self._nonfinite: dict[tuple[int, int], dict[str, tuple[int, int]]] = {}

    def __getstate__(self) -> dict:
        """Spawn/forkserver DataLoader workers and `to_hf(streaming=True)` pickle the datasets
        that hold a reader: open files, decoded groups and the lock stay behind (each process
        opens its own, checksums included)."""
        state = self.__dict__.copy()
        del state["_files"], state["_cache"], state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._files, self._cache, self._lock = {}, OrderedDict(), threading.Lock()

    def bound_ids(self, top: int, said: str) -> None:
        """Hold every token id below `top` too (`said`: what it is, and the fix), where the manifest
        records no vocab_size (ids packed without a tokenizer) or a larger one: a trainer's model
        vocabulary. check_group's one reduction over each decoded group's ids holds it, before
        any row of the group is handed out (no pass of its own); groups decoded before are dropped."""
        with self._lock:
            self._ids_below = (int(top), said)
            self._cache.clear()

    def _group(self, shard: int, rg: int) -> dict:
        with self._lock, self.manifest.reading():
            return self._group_locked(shard, rg)

    def _group_locked(self, shard: int, rg: int) -> dict:
        key = (shard, rg)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        if shard not in self._files:
            check_checksum(self.manifest, shard)  # before any of its rows is used
            self._files[shard] = _open(self.manifest, shard)
        side = [c.name for c in self.side_columns]
        where = f"{self.manifest.shard_path(shard)} row group {rg}"
        lists = [*LISTS, *(c for c in NULLS_ONLY if c in WITH_GROUP)]  # the bench's checks off: LISTS alone
        t = _read_group(self._files[shard], rg, [*lists, *side], self.manifest.shard_path(shard))
        try:  # the decoded columns made contiguous, and the checks' passes: allocations the decode's door says
            g = {c: _list_column(t.column(c)) for c in lists}
            g["side"] = {c.name: _side_column(t.column(c.name), c, where) for c in self.side_columns}
            check_side_lengths(where, g)
            ix, i0 = self.index, self._first[key]
            rows = slice(i0, i0 + t.num_rows)
            g["tail_pad"], g["fill_pad"], g["singleton"] = ix.tail_pad[rows], ix.fill_pad[rows], ix.singleton[rows]
            g["fill_seg"] = ix.fill_seg[rows]
            check_group(self.manifest, where, g, ix.num_tokens[rows],
                        ix.stripped[rows] - ix.num_tokens[rows], ix.num_loss_tokens[rows], ix.n_seg[rows],
                        ids_below=self._ids_below, max_id=self.manifest.shard_max_id(shard))
            odd = check_side_nonfinite(self.manifest, where, g["side"], self._nonfinite_before(key))
        except MemoryError as e:
            raise decode_out_of_memory(e, self.manifest.shard_path(shard), f"row group {rg}") from None
        if odd:
            self._nonfinite[key] = odd
        self._cache[key] = g
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return g

    def _nonfinite_before(self, key: tuple[int, int]) -> dict[str, tuple[int, int]]:
        """Per side column, the (NaN, +-inf) counts of the groups decoded so far but `key`."""
        total: dict[str, tuple[int, int]] = {}
        for k, cols in self._nonfinite.items():
            for name, (nan, inf) in cols.items():
                if k != key:
                    a, b = total.get(name, (0, 0))
                    total[name] = (a + nan, b + inf)
        return total

    def groups(self):
        """Every row group in on-disk order, each checked as `row` would check it (its shard's
        checksum first): ((shard, row group), decoded group). For a caller that reads every
        row without handing one out (`inspect`) or whose rows another library reads (`to_hf`)."""
        for key in self._first:
            yield key, self._group(*key)

    def row(self, i: int) -> SlabRow:
        """Slab `i` in on-disk order: an integer (numpy's too), negative from the end; a wrong kind
        or a slab out of range is packtool's one line naming it and the range (params.position),
        never numpy's IndexError or a row of another slab."""
        i = position("i", i, len(self.index), "slab", path=self.manifest.path)
        ix = self.index
        g = self._group(int(ix.shard[i]), int(ix.row_group[i]))
        r = int(ix.row[i])

        def sl(c):
            v, o = g[c]
            return v[o[r]:o[r + 1]]

        cu_pad = sl("cu_seqlens_padded").astype(np.int64)  # its last is the row's tokens (check_group)
        ids = sl("input_ids")
        side = {name: v[o[r]:o[r + 1]] for name, (v, o) in g["side"].items()}  # lengths held at decode
        return SlabRow(input_ids=ids, loss_mask=sl("loss_mask"), seq_lens=sl("seq_lens"),
                       seg_padded=np.diff(cu_pad), tail_pad=int(g["tail_pad"][r]),
                       fill_pad=int(g["fill_pad"][r]), side=side)


def check_rows(manifest: SlabManifest, extra: tuple[str, ...] = (), advance=None,
               each_group=None) -> tuple[SlabIndex, dict[str, np.ndarray]]:
    """Every check a reader makes, over the whole output, without handing out a row: the open
    checks, then each shard's checksum and every row group (`inspect`, which reports on the
    output, refuses what a training run would). One row group decoded at a time.

    Returns the index and what the checks read, so that a caller reporting on the output reads
    none of it again: `_scan`'s columns (with the `extra` scalar columns read in the same pass)
    and `seq_lens`, the values the row-group checks decoded, aligned with `source_index`.
    `each_group(g)`: called with every checked row group as `SlabReader` holds it (list columns
    as (values, offsets), `side`), for figures from its other columns (inspect's side columns).
    `advance(n)`: called as the row-group checks finish shards (a progress bar)."""
    with manifest.reading():
        cat = _scan(manifest, extra)
    index = SlabIndex._checked(manifest, cat)
    reader = SlabReader(manifest, index, cache=1)
    lens, done = [], 0
    for (shard, _), g in reader.groups():
        if advance and shard > done:
            advance(shard - done)
            done = shard
        if each_group:
            each_group(g)
        v, o = g["seq_lens"]
        lens.append(v[o[0]:o[-1]].copy())  # a copy: the view would keep the group's tokens alive
    if advance:
        advance(len(manifest.shards) - done)
    cat["seq_lens"] = np.concatenate(lens) if lens else np.zeros(0, np.int32)
    return index, cat


def longest_segment(manifest: SlabManifest, index: SlabIndex, above: int) -> tuple[int, str] | None:
    """The longest padded segment (what sizes a model's positions: THD's max_seqlen) when one is
    longer than `above`, with its shard and row; None when none is. Only row groups holding a slab
    longer than `above` are read, and only their cu_seqlens_padded: nothing when none is."""
    slab_len = index.stripped + index.tail_pad + index.fill_pad
    over = np.flatnonzero(slab_len > above)
    best: tuple[int, str] | None = None
    for si, rg in sorted(set(zip(index.shard[over].tolist(), index.row_group[over].tolist()))):
        path = manifest.shard_path(si)
        col = _read_group(_open(manifest, si), rg, ["cu_seqlens_padded"], path).column(0)
        try:
            values, offsets = list_parts(col.combine_chunks())
        except MemoryError as e:  # made contiguous past the guarded decode: the decode's door says it
            raise decode_out_of_memory(e, path, f"row group {rg}") from None
        seg = np.diff(values.astype(np.int64))
        seg[offsets[1:-1] - 1] = 0  # a row's last offset to the next row's 0 is no segment
        k = int(np.argmax(seg)) if seg.size else 0
        if seg.size and seg[k] > above and (best is None or seg[k] > best[0]):
            row = int(np.searchsorted(offsets, k, side="right")) - 1
            best = (int(seg[k]), f"{path} row group {rg} row {row}")
    return best

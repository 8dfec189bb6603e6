"""Test helpers for the megatron consumer: slab directories written straight from
FORMAT.md (packtool.layout + pyarrow), a tiny GPT, and an in-process CP group.

Kept independent of the packer so these tests pin the format contract, not the writer.
"""
from __future__ import annotations

import os
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
import torch

from packtool.align import Alignment
from packtool.layout import compute_layout
from packtool.tokenize.checksum import shard_checksum
from packtool.slabs.format import FORMAT_NAME, alignment_dict, write_manifest
from packtool.slabs.schema import SCHEMA_VERSION

VOCAB = 128
PAD = 0
SYNTHETIC_FINGERPRINT = "5" * 64  # the form pack writes; no source to compute it from


def random_sequences(n: int, lo: int, hi: int, seed: int = 0, prompt: bool = True):
    """(ids, loss_mask) pairs: random tokens in [1, VOCAB); loss off on the first token and,
    with `prompt`, on a random prompt prefix."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        L = int(rng.integers(lo, hi + 1))
        ids = rng.integers(1, VOCAB, L).astype(np.int32)
        mask = np.ones(L, np.uint8)
        mask[0] = 0
        if prompt and L > 3:
            mask[: int(rng.integers(1, L // 2 + 1))] = 0
        out.append((ids, mask))
    return out


def slab_table(seqs, bins, align: Alignment, dp_rank=None, step=None, microbatch=None, side=()):
    """A pyarrow Table of slabs in FORMAT.md's schema. bins: list of lists of seq indices.
    side: (SideColumn, one array per sequence) pairs, written as FORMAT.md "Side columns"
    says: token-aligned, fill on every pad, list<dtype> or list<fixed_size_list<dtype, K>>."""
    lens = np.array([len(seqs[i][0]) for b in bins for i in b], np.int64)
    offs = np.concatenate(([0], np.cumsum([len(b) for b in bins])))
    lay = compute_layout(lens, offs, align)
    cols = {k: [] for k in ("input_ids", "loss_mask", "seq_lens", "cu_seqlens",
                            "cu_seqlens_padded", "cp_offsets", "source_index", "chunk_index",
                            "source_offset")}
    scal = {k: [] for k in ("num_tokens", "num_loss_tokens", "layout_pad", "tail_pad",
                            "fill_pad", "singleton", "slab_index", "dp_rank", "step",
                            "microbatch")}
    side_cols = {c.name: [] for c, _ in side}
    for b, members in enumerate(bins):
        T = int(lay.slab_len[b])
        ids = np.full(T, PAD, np.int32)
        mask = np.zeros(T, np.uint8)
        side_slab = {c.name: c.filled(T) for c, _ in side}
        lo, hi = lay.seg_offsets[b], lay.seg_offsets[b + 1]
        src = list(members) + [-1] * (hi - lo - len(members))
        for k, si in zip(range(lo, hi), src):
            if si < 0:
                continue
            st = int(lay.seg_start[k])
            s_ids, s_mask = seqs[si]
            ids[st:st + len(s_ids)] = s_ids
            mask[st:st + len(s_ids)] = s_mask
            for c, values in side:
                side_slab[c.name][st:st + len(s_ids)] = values[si]
        cu_pad = lay.cu_seqlens_padded(b)
        cols["input_ids"].append(ids)
        for name, v in side_slab.items():
            side_cols[name].append(v)
        cols["loss_mask"].append(mask)
        cols["seq_lens"].append(lay.seg_len[lo:hi].astype(np.int32))
        cols["cu_seqlens"].append(lay.cu_seqlens(b))
        cols["cu_seqlens_padded"].append(cu_pad)
        cols["cp_offsets"].append((cu_pad // align.cp).astype(np.int32))
        cols["source_index"].append(np.array(src, np.int64))
        cols["chunk_index"].append(np.array([0 if s >= 0 else -1 for s in src], np.int32))
        cols["source_offset"].append(np.zeros(len(src), np.int64))
        scal["num_tokens"].append(int(lay.seg_len[lo:hi].sum()))
        scal["num_loss_tokens"].append(int(mask.sum()))
        scal["layout_pad"].append(int(lay.layout_pad[b]))
        scal["tail_pad"].append(int(lay.tail_pad[b]))
        scal["fill_pad"].append(int(lay.fill[b]))
        scal["singleton"].append(False)
        scal["slab_index"].append(b)
        scal["dp_rank"].append(0 if dp_rank is None else int(dp_rank[b]))
        scal["step"].append(b if step is None else int(step[b]))
        scal["microbatch"].append(0 if microbatch is None else int(microbatch[b]))
    lt = {"input_ids": pa.int32(), "loss_mask": pa.uint8(), "seq_lens": pa.int32(),
          "cu_seqlens": pa.int32(), "cu_seqlens_padded": pa.int32(), "cp_offsets": pa.int32(),
          "source_index": pa.int64(), "chunk_index": pa.int32(), "source_offset": pa.int64()}
    st = {"num_tokens": pa.int32(), "num_loss_tokens": pa.int32(), "layout_pad": pa.int32(),
          "tail_pad": pa.int32(), "fill_pad": pa.int32(), "singleton": pa.bool_(),
          "slab_index": pa.int64(), "dp_rank": pa.int32(), "step": pa.int32(),
          "microbatch": pa.int32()}
    arrays = {k: pa.array(v, type=pa.list_(lt[k])) for k, v in cols.items()}
    arrays.update({k: pa.array(v, type=st[k]) for k, v in scal.items()})
    for c, _ in side:
        per = side_cols[c.name]
        flat = pa.array(np.concatenate(per).reshape(-1), type=pa.from_numpy_dtype(c.np_dtype))
        if c.width > 1:
            flat = pa.FixedSizeListArray.from_arrays(flat, c.width)
        offs = pa.array(np.concatenate(([0], np.cumsum([len(v) for v in per]))).astype(np.int32))
        arrays[c.name] = pa.ListArray.from_arrays(offs, flat)
    return pa.table(arrays)


def write_slab_dir(path, seqs, bins, align: Alignment, dp: int = 1, rows_per_group: int = 4,
                   shards: int = 1, side=(), **plan):
    """Write shards + the manifest; returns the path."""
    os.makedirs(path, exist_ok=True)
    table = slab_table(seqs, bins, align, side=side, **plan)
    per = -(-table.num_rows // shards)
    files = []
    for s in range(shards):
        part = table.slice(s * per, per)
        name = f"slabs-{s:05d}.parquet"
        pq.write_table(part, os.path.join(path, name), row_group_size=rows_per_group,
                       compression="zstd")
        physical = sum(int(pa.compute.sum(part.column(k)).as_py() or 0)
                       for k in ("num_tokens", "layout_pad", "tail_pad", "fill_pad"))
        files.append({"file": name, "rows": part.num_rows, "bytes": os.path.getsize(os.path.join(path, name)),
                      "tokens": physical, "loss_tokens": int(pa.compute.sum(part.column("num_loss_tokens")).as_py() or 0),
                      "xxh3_128": shard_checksum(os.path.join(path, name))})
    a = align
    manifest = {
        "format": FORMAT_NAME, "schema_version": SCHEMA_VERSION, "packtool_version": "0.1.0",
        # greedy_bins is a first fit: the closest real algorithm name the format accepts
        "config": {"alignment": alignment_dict(a),
                   "packing": {"algorithm": "ffd", "overflow": "error", "dp": dp, "seed": 0}},
        "tokenizer": {"path": "test", "bos_id": 1, "eos_id": 2, "pad_id": PAD, "vocab_size": VOCAB,
                      **dict.fromkeys(("sha256", "config_sha256", "template_sha256", "chat_template", "bos_token",
                                       "eos_token", "pad_token"))},
        "input": {"fingerprint": SYNTHETIC_FINGERPRINT, "files": []}, "stats": _stats(table, a, side),
        "shards": files, "side_columns": [c.to_dict() for c, _ in side]}
    write_manifest(path, manifest)
    return path


def _stats(table, align: Alignment, side) -> dict:
    """The manifest's stats as pack writes them (every key: slabs.fields), summed from the slabs."""
    col = {k: table.column(k).to_pylist() for k in ("num_tokens", "num_loss_tokens", "layout_pad", "tail_pad",
                                                     "fill_pad", "source_index", "seq_lens")}
    src = np.concatenate([np.asarray(x, np.int64) for x in col["source_index"]] or [np.zeros(0, np.int64)])
    lens = np.concatenate([np.asarray(x, np.int64) for x in col["seq_lens"]] or [np.zeros(0, np.int64)])[src >= 0]
    total = {k: int(sum(col[k])) for k in ("num_tokens", "num_loss_tokens", "layout_pad", "tail_pad", "fill_pad")}
    physical = [sum(v) for v in zip(*(col[k] for k in ("num_tokens", "layout_pad", "tail_pad", "fill_pad")))]
    zero = dict.fromkeys(("sequences", "chunks", "targets_lost", "tokens_dropped", "singletons"), 0)
    floats = {c.name: 0 for c, _ in side if not c.is_int}
    return {"sequences": int(np.unique(src[src >= 0]).size), "segments": int(lens.size), "slabs": table.num_rows,
            "real_tokens": total["num_tokens"], "loss_tokens": total["num_loss_tokens"],
            "physical_tokens": int(sum(physical)), "layout_pad": total["layout_pad"], "tail_pad": total["tail_pad"],
            "fill_pad": total["fill_pad"], "slack": int(sum(max(align.usable - t, 0) for t in physical)),
            "lower_bound": align.lower_bound(lens), "l2_bound": align.l2_bound(lens),
            "dp_imbalance": 0.0, "dp_moved": 0, "overflow": {"policy": "error", **zero},
            "skipped_rows": {"empty": 0, "all_masked": 0},
            "changes": {"rows_skipped_empty": 0, "rows_skipped_all_masked": 0, "sequences_truncated": 0,
                        "tokens_dropped": 0, "sequences_split": 0, "chunks": 0, "targets_lost": 0},
            "side_nan": floats, "side_inf": dict(floats)}


def greedy_bins(seqs, align: Alignment):
    """First-fit in order by footprint; enough to make multi-segment slabs."""
    bins, loads = [], []
    for i, (ids, _) in enumerate(seqs):
        fp = int(align.seq_footprint([len(ids)])[0])
        for b in range(len(bins)):
            if int(align.bin_footprint(loads[b] + fp)) <= align.usable:
                bins[b].append(i)
                loads[b] += fp
                break
        else:
            bins.append([i])
            loads.append(fp)
    return bins


class _Exchange:
    """Rendezvous of `n` threads by tag (autograd may run backward nodes in a different
    order on different ranks, so pairing is by the forward call's tag, not by order)."""

    def __init__(self, n: int):
        self.n = n
        self.cv = threading.Condition()
        self.slots: dict = {}
        self.reads: dict = {}

    def swap(self, tag, rank, x):
        with self.cv:
            self.slots.setdefault(tag, [None] * self.n)[rank] = x
            self.cv.notify_all()
            self.cv.wait_for(lambda: all(v is not None for v in self.slots[tag]), timeout=60)
            got = list(self.slots[tag])
            self.reads[tag] = self.reads.get(tag, 0) + 1
            if self.reads[tag] == self.n:
                del self.slots[tag], self.reads[tag]
        if any(v is None for v in got):
            raise TimeoutError(f"CP exchange {tag}: a rank never arrived")
        return got


class _ThreadGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, tag):
        ctx.group, ctx.tag = group, tag
        parts = group.ex.swap(("f", tag), group._rank, x.detach().clone())
        return torch.cat(parts, 0)

    @staticmethod
    def backward(ctx, grad):
        g = ctx.group
        parts = g.ex.swap(("b", ctx.tag), g._rank, grad.detach().clone())
        n = grad.shape[0] // g.ex.n
        return sum(p[g._rank * n:(g._rank + 1) * n] for p in parts), None, None


class ThreadCPGroup:
    """A CP 'process group' for ranks simulated as threads of one process: size(),
    rank() (what megatron's THD RoPE asks) and an autograd all_gather (what packtool's
    attention asks). Gathered K/V are the ranks' K/V concatenated in rank order."""

    def __init__(self, ex: _Exchange, rank: int):
        self.ex, self._rank, self._calls = ex, rank, 0

    def size(self):
        return self.ex.n

    def rank(self):
        return self._rank

    def all_gather(self, x):
        self._calls += 1
        return _ThreadGather.apply(x, self, self._calls)


def thread_cp_groups(cp: int):
    ex = _Exchange(cp)
    return [ThreadCPGroup(ex, r) for r in range(cp)]


def run_threads(fns):
    """Run callables in threads; re-raise the first error."""
    res, errs = [None] * len(fns), []

    def wrap(i, f):
        try:
            res[i] = f()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errs.append(e)

    ts = [threading.Thread(target=wrap, args=(i, f)) for i, f in enumerate(fns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]
    return res


def logprob_of(ids):
    """A per-token value that names its token: whoever reads it can tell which token it is."""
    return (-np.asarray(ids, np.float64) / 1000).astype(np.float32)


def random_side(seqs, k: int = 4, seed: int = 0):
    """Side columns for `seqs` as `write_slab_dir(side=...)` takes them: old_logprobs (float32,
    a function of the token), returns (float64, fill -9: not the default) and support (int32
    rows of k: the token once among other candidates, -1 at the end; all -1 off the loss)."""
    from packtool.side import SideColumn
    rng = np.random.default_rng(seed)
    lp, ret, sup = [], [], []
    for ids, mask in seqs:
        lp.append(logprob_of(ids))
        ret.append(rng.normal(size=len(ids)))
        rows = np.full((len(ids), k), -1, np.int32)
        for j in np.flatnonzero(mask):
            n = int(rng.integers(1, k + 1))
            rows[j, :n] = np.concatenate(([ids[j]], VOCAB + rng.permutation(50)[:n - 1]))
        sup.append(rows)
    return [(SideColumn("old_logprobs", "float32"), lp), (SideColumn("returns", "float64"), ret),
            (SideColumn("support", "int32", width=k, kind="support"), sup)]

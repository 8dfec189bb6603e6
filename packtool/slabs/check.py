"""What every consumer of a packed output checks before it uses a byte of it (FORMAT.md, "What
a reader checks"). `slabs.reader` runs these for the Megatron dataset, `packtool train`, `packtool.hf`
and `inspect` (`reader.check_rows`: all of them, before it reports). `verify` checks the same things
and more (coverage, DP plan, source tokens), reporting all of them rather than the first.

At open, one stat and one Parquet footer per shard (`check_output`): every shard listed once,
present, a file of the folder (`open_rules.linked_shard`: no link out of it), of the listed size;
nothing unlisted that a plain Parquet reader would read as data; each footer's schema the format's
(plus the manifest's side columns, nothing else), its rows the listed ones, adding up to `stats.slabs`.
On what the open scan read: tokens per shard, the DP plan, slab_index (`check_counts`); entries per
slab, each segment real or a trailing fill (`check_segment_counts`, `open_rules`); every source row
once, chunks only under --overflow split (`check_coverage`).

While reading: a shard's checksum before its first row is handed out (`check_checksum`, once per
process), and every decoded row group (`check_group`: lengths, seq_lens as many segments as
source_index and 0 where it marks the fill, `cu_seqlens`, `cp_offsets`, the layout of `seq_lens`,
pads, loss flags, token ids below `vocab_size` or a trainer's bound, side columns' fill on pads),
vectorized numpy; nulls at any depth (`check_nulls`), side columns' lengths (`check_side_lengths`).
Float side columns' NaN/inf values against the manifest's counts: slabs/check_side.py. Left to
`verify`: a NaN/inf count below the manifest's, and the support rule (FORMAT.md says why).
Every failure is one line naming the shard (and row), exit 2 on the CLI: a `FormatError` (a bound's, config);
where it is and the fix it names are slabs/check_said.py's.
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.arrays import first_null
from packtool.errors import PacktoolConfigError
from packtool.integers import TOKEN_ID_BOUND
from packtool.layout import compute_layout
from packtool.planning.core import OVERFLOW_FIGURES
from packtool.slabs.check_said import fix_of, listed, shard_gone, slab_at  # noqa: F401  (shard_gone: re-exported)
from packtool.slabs.format import FormatError, SlabManifest
from packtool.slabs.names import LEGACY_MANIFEST, in_flight, stray_entries
from packtool.slabs.open_rules import NO_REAL_SEGMENT, coverage, linked_shard, no_real_segment, plan_breaks, segment_fields
from packtool.slabs.schema import repeated_column, side_field_problem, slab_schema
from packtool.slabs.token_pass import BAD, _runs, _token_pass
from packtool.side import side_columns_from_manifest
from packtool.storage import arrow_file, bucket_gone, file_size, is_file, is_uri, store_failure
from packtool.tokenize.checksum import CHECKSUMS, SHARD_CHECKSUM, fast_digest, file_digest


def declared_columns(raw: dict) -> dict[str, pa.DataType]:
    """Columns a shard of this manifest holds: the format's and the side columns the manifest
    declares, with their types (`format.slab_schema`, the writer's own)."""
    side = side_columns_from_manifest(raw.get("side_columns"))
    return {f.name: f.type for f in slab_schema(side)}


def check_output(sm: SlabManifest) -> list[pq.FileMetaData]:
    """The open-time checks; returns each listed shard's Parquet footer."""
    listed = sm.shards
    seen: set[str] = set()
    for n in listed:
        if n in seen:
            raise FormatError(f"{sm.manifest}: shard {n} is listed twice (its slabs would be read twice); "
                              f"{fix_of(sm)}")
        seen.add(n)
    stray = _strays(sm)
    if stray and is_uri(sm.path):  # a writer may have moved on between the listing and the intents
        stray = sorted(set(stray) & set(_strays(sm)))
    if stray:
        more = f" (and {len(stray) - 1} more)" if len(stray) > 1 else ""
        raise FormatError(f"{os.path.join(sm.path, stray[0])}{more}: in the output folder but not listed in "
                          f"{os.path.basename(sm.manifest)} (a stray or moved shard: plain Parquet readers "
                          f"would read it as slabs); move it out, or {fix_of(sm)}")
    want = declared_columns(sm.raw)
    footers, rows = [], 0
    for i, entry in enumerate(sm.raw["shards"]):
        md = _check_shard_file(sm, i, entry, want)
        footers.append(md)
        rows += md.num_rows
    slabs = sm.raw["stats"]["slabs"]  # every stats key a count: slabs.fields, at parse
    if slabs != rows:
        raise FormatError(f"{sm.manifest}: stats.slabs is {slabs} but the listed shards hold {rows} rows; "
                          f"{fix_of(sm)}")
    return footers


def _strays(sm: SlabManifest) -> list[str]:
    """Unlisted names a plain reader would take for shards, less those a run's intent names
    (listed first: a shard is announced before it is put, its intent removed after it goes)."""
    legacy = os.path.basename(sm.manifest) == LEGACY_MANIFEST
    names = stray_entries(sm.path, sm.shards)
    flying = in_flight(sm.path) if names else set()
    return [n for n in names if not (legacy and n == LEGACY_MANIFEST) and n not in flying]


def _check_shard_file(sm: SlabManifest, i: int, entry: dict, want: dict) -> pq.FileMetaData:
    path = sm.shard_path(i)
    link = linked_shard(sm.path, sm.shards[i])
    if link is not None and link.refused:
        raise FormatError(f"{path}: {link.refused}")
    try:
        if not is_file(path):
            raise FileNotFoundError(path)
        size = file_size(path)
    except FileNotFoundError:
        raise bucket_gone(path) or FormatError(f"{path}: {listed(sm)} but missing (or not a plain file); "
                                               f"{fix_of(sm)}") from None
    except OSError as e:
        raise store_failure(e, path) or FormatError(f"{path}: cannot be read ({e.strerror or e}); {fix_of(sm)}") from None
    if size != entry["bytes"]:  # the entry's counts: slabs.fields, at parse
        hint = " (truncated)" if size < entry["bytes"] else ""
        raise FormatError(f"{path}: {size} bytes, the manifest says {entry['bytes']}{hint}; {fix_of(sm)}")
    try:
        md = pq.read_metadata(arrow_file(path))
        schema = md.schema.to_arrow_schema()
    except (OSError, pa.ArrowException, ValueError) as e:
        raise store_failure(e, path, "footer") or FormatError(f"{path}: cannot be read as Parquet ({' '.join(str(e).split())[:160]}); "
                          f"{fix_of(sm)}") from None
    twice = repeated_column(schema)
    if twice:
        raise FormatError(f"{path}: {twice}")
    for col, typ in want.items():
        j = schema.get_field_index(col)
        if j < 0:
            raise FormatError(f"{path}: column {col!r} is missing; {fix_of(sm)}")
        if schema.field(j).type != typ:
            raise FormatError(f"{path}: column {col!r} is {schema.field(j).type}, the format says {typ}; "
                              f"{fix_of(sm)}")
    for c in sm.side_columns:  # the kind and fill are no part of the type: the field's record
        problem = side_field_problem(schema.field(c.name), c)
        if problem:
            raise FormatError(f"{path}: {problem}; {fix_of(sm)}")
    extra = [n for n in schema.names if n not in want]
    if extra:
        raise FormatError(f"{path}: column {extra[0]!r} is not in the format and the manifest declares no "
                          f"such side column; {fix_of(sm)}")
    if md.num_rows != entry["rows"]:
        raise FormatError(f"{path}: {md.num_rows} rows, the manifest says {entry['rows']}; {fix_of(sm)}")
    return md


def check_counts(sm: SlabManifest, cat: dict[str, np.ndarray]) -> None:
    """Per-shard tokens and loss tokens from the slabs' scalars (`cat`: what the reader's open scan
    read) against the manifest; DP ranks inside the plan's range, the plan itself, slab_index."""
    shard, loss, dp_rank = cat["shard"], cat["num_loss_tokens"], cat["dp_rank"]
    physical = cat["num_tokens"] + cat["layout_pad"] + cat["tail_pad"] + cat["fill_pad"]
    n = len(sm.shards)
    tok = np.bincount(shard, weights=physical, minlength=n)
    los = np.bincount(shard, weights=loss, minlength=n)
    for i, entry in enumerate(sm.raw["shards"]):
        for key, got in (("tokens", tok[i]), ("loss_tokens", los[i])):
            if entry[key] != int(got):
                raise FormatError(f"{sm.shard_path(i)}: holds {int(got)} {key.replace('_', ' ')}, the "
                                  f"manifest says {entry[key]}; {fix_of(sm)}")
    stats = sm.raw["stats"]
    for key, got in (("physical_tokens", tok.sum()), ("loss_tokens", los.sum())):
        if stats[key] != int(got):
            raise FormatError(f"{sm.manifest}: stats.{key} is {stats[key]}, the shards hold {int(got)}; {fix_of(sm)}")
    idx = cat["slab_index"] if "slab_index" in cat and cat["slab_index"].size == shard.size else None
    found = plan_breaks(idx, dp_rank, cat["step"], cat["microbatch"], sm.dp)
    if found:
        raise FormatError(f"{slab_at(sm, cat, found[0].slab)}: {found[0].why}; {fix_of(sm)}")


def check_checksum(sm: SlabManifest, i: int) -> None:
    """Hash shard i's whole file and compare with its manifest entry (xxh3-128, or sha256 in
    older outputs): a flipped byte anywhere in it stops the reader before any of its rows."""
    entry = sm.raw["shards"][i]
    alg = next((a for a in CHECKSUMS if a in entry), None)
    if alg is None:
        raise FormatError(f"{sm.manifest}: shard {sm.shards[i]} has no checksum ({SHARD_CHECKSUM}); {fix_of(sm)}")
    path = sm.shard_path(i)
    try:
        got = fast_digest(path) if alg == SHARD_CHECKSUM and not is_uri(path) else file_digest(path, alg)
    except FileNotFoundError:
        raise shard_gone(sm, i) from None
    except OSError as e:
        raise store_failure(e, path) or FormatError(f"{path}: cannot be read ({e.strerror or e}); {fix_of(sm)}") from None
    if got != entry[alg]:
        # whole digests: an entry edited in its last digit read as two equal 16-digit prefixes
        raise FormatError(f"{path}: {alg} is {got}, the manifest says {entry[alg]}: the file (or the "
                          f"manifest's entry for it) changed after packing (flipped or edited bytes); {fix_of(sm)}")


# --- one decoded row group ---------------------------------------------------------------

def check_nulls(path: str, rg: int, t: pa.Table) -> None:
    """No null at any depth in any column read: a null token id or side value would read back
    as a made-up number."""
    for c in t.column_names:
        r = first_null(t.column(c))
        if r >= 0:
            raise FormatError(f"{path} row group {rg} row {r}: column {c!r} holds nulls; run `packtool verify` "
                              f"on the output")


def check_side_lengths(where: str, g: dict) -> None:
    """Every side column holds one value per token of each slab: checked as the group is decoded,
    so that `inspect` (which never slices a row) refuses it as a training run's reader does."""
    ids_off = g["input_ids"][1]
    for name, (_, off) in g["side"].items():
        if not np.array_equal(off, ids_off):
            r = int(np.flatnonzero(np.diff(off) != np.diff(ids_off))[0])
            raise FormatError(f"{where} row {r}: side column {name!r} has {int(off[r + 1] - off[r])} values for "
                              f"{int(ids_off[r + 1] - ids_off[r])} tokens; run `packtool verify` on the output")


def _check_cu_seqlens(col, cu_off, within, lens, row_of, n_rows, fail) -> None:
    """cu_seqlens is what a varlen attention kernel is fed (cu_seqlens_q/kv): 0, then steps of
    seq_lens. One small list column (n_seg+1 ints a slab) and a diff: cheap enough for every reader."""
    cs, cs_off = col
    if not np.array_equal(cs_off, cu_off):
        fail(np.diff(cs_off) != np.diff(cu_off), lambda r: "cu_seqlens does not hold n_seg+1 offsets")
    cs = cs.astype(np.int64)
    bad = cs[cs_off[:-1]] != 0
    bad[row_of[np.diff(cs)[within] != lens]] = True
    if bad.any():
        fail(bad, lambda r: "cu_seqlens is not 0 then the prefix sums of seq_lens (cu_seqlens edited)")


def _check_cp_offsets(col, cu, cu_off, cp, fail) -> None:
    """cp_offsets is cu_seqlens_padded // cp: the local cu offsets of every CP rank, which FORMAT.md's
    standalone reader hands a trainer. Its values arrive with the group (`reader.WITH_GROUP`)."""
    vals, off = col
    if not np.array_equal(off, cu_off):
        fail(np.diff(off) != np.diff(cu_off), lambda r: "cp_offsets does not hold n_seg+1 offsets")
    bad = vals.astype(np.int64) != cu // cp
    if bad.any():
        fail(np.bincount(np.repeat(np.arange(cu_off.size - 1), np.diff(cu_off))[bad], minlength=cu_off.size - 1) > 0,
             lambda r: f"cp_offsets is not cu_seqlens_padded // cp (cp={cp})")


def check_group(sm: SlabManifest, where: str, g: dict, num_tokens: np.ndarray, layout_pad: np.ndarray,
                num_loss: np.ndarray, n_seg: np.ndarray, ids_below: tuple[int, str] | None = None,
                max_id: int | None = None) -> None:
    """A decoded row group (`g`: list columns as (values, offsets), `tail_pad`, `fill_pad`, `singleton`)
    against FORMAT.md's per-slab rules, with the rows' scalars from the index (`n_seg`: the
    rows' source_index entries, read at open). Vectorized over segments and tokens. `ids_below`:
    a trainer's bound on the ids and its words (`SlabReader.bound_ids`), held in the same pass;
    `max_id`: the shard's recorded largest id (`SlabManifest.shard_max_id`), held there too."""
    if all(g[k][1].size <= 1 for k in ("input_ids", "loss_mask", "seq_lens", "cu_seqlens_padded")):
        return  # a group of no rows breaks no per-slab rule (its layout below would size arrays at -1)
    ids, id_off = g["input_ids"]
    mask, mask_off = g["loss_mask"]
    lens, seg_off = g["seq_lens"]
    cu, cu_off = g["cu_seqlens_padded"]
    lens, cu = lens.astype(np.int64), cu.astype(np.int64)
    T = np.diff(id_off)

    def fail(rows, what):
        r = int(np.flatnonzero(rows)[0])
        raise FormatError(f"{where} row {r}: {what(r)}; {fix_of(sm)}")

    if not np.array_equal(id_off, mask_off):
        fail(np.diff(id_off) != np.diff(mask_off), lambda r: "input_ids and loss_mask differ in length")
    nseg = np.diff(seg_off)
    if (nseg < 1).any():  # verify's words: a row of n_seg+1 = 1 offsets has no offset problem
        fail(nseg < 1, lambda r: f"{NO_REAL_SEGMENT} (no segment at all)")
    if not np.array_equal(np.diff(cu_off), nseg + 1):
        fail(np.diff(cu_off) != nseg + 1, lambda r: "cu_seqlens_padded does not hold n_seg+1 offsets")
    if not np.array_equal(nseg, n_seg):  # inspect pairs them entry by entry
        fail(nseg != n_seg, lambda r: f"seq_lens holds {int(nseg[r])} segments, source_index and chunk_index "
             f"{int(n_seg[r])}: one entry per segment each")
    first, last = cu[cu_off[:-1]], cu[cu_off[1:] - 1]
    if (first != 0).any() or (last != T).any():
        fail((first != 0) | (last != T), lambda r: f"cu_seqlens_padded runs {int(first[r])}..{int(last[r])}, "
             f"the slab holds {int(T[r])} tokens")
    fill = lens == 0  # a fixed-length fill segment; real segments hold >= 1 token
    row_of = np.repeat(np.arange(T.size), nseg)
    if (lens < 0).any() or (fill.any() and sm.alignment.fixed_length is None):
        fail(np.bincount(row_of[(lens < 0) | fill], minlength=T.size) > 0,
             lambda r: "a segment of length <= 0 outside a fixed-length fill")
    if g.get("fill_seg") is not None:  # the fill by source_index (-1, the last segment alone: held at open)
        said = np.zeros(lens.size, bool)
        said[seg_off[1:] - 1] = g["fill_seg"]
        if not np.array_equal(fill, said):
            fail(np.bincount(row_of[fill != said], minlength=T.size) > 0, lambda r: "seq_lens and source_index "
                 "disagree on the fixed-length fill (seq_lens 0, source_index -1: the last segment, in both or neither)")
    if no_real_segment(nseg, fill).any():
        fail(no_real_segment(nseg, fill), lambda r: f"{NO_REAL_SEGMENT} (only the fixed-length fill)")
    real = ~fill
    counts = np.bincount(row_of[real], minlength=T.size)
    lay = compute_layout(lens[real], np.concatenate(([0], np.cumsum(counts))), sm.alignment)
    within = np.ones(cu.size - 1, bool)
    within[cu_off[1:-1] - 1] = False  # the step from one row's last offset to the next row's 0
    padded = np.diff(cu)[within]
    if lay.seg_padded.size != padded.size or not np.array_equal(lay.seg_padded, padded) \
            or not np.array_equal(lay.slab_len, T):
        bad_seg = np.zeros(T.size, bool)
        if lay.seg_padded.size == padded.size:
            bad_seg[row_of[lay.seg_padded != padded]] = True
        fail(bad_seg | (lay.slab_len != T) | (np.diff(lay.seg_offsets) != nseg),
             lambda r: f"its segments' padded lengths are not the layout of its seq_lens under "
                       f"{sm.alignment.describe()} C={sm.alignment.capacity} (cu_seqlens_padded shifted or edited)")
    _check_cu_seqlens(g["cu_seqlens"], cu_off, within, lens, row_of, T.size, fail)
    if "cp_offsets" in g:
        _check_cp_offsets(g["cp_offsets"], cu, cu_off, sm.alignment.cp, fail)
    over, single = lay.footprint > sm.alignment.usable, np.asarray(g["singleton"], bool)
    # verify's capacity and singleton rules: the flag is set exactly on a lone sequence over U,
    # and only where the output was packed with --overflow singleton
    may = over & (counts == 1) & (sm.packing.overflow == "singleton")
    checks = ((over & ~single, lambda r: f"footprint {int(lay.footprint[r])} exceeds the usable capacity "
               f"{sm.alignment.usable} and the slab is not marked singleton"),
              (single & ~may, lambda r: f"slab is marked singleton but holds {int(counts[r])} real segment(s) "
               f"with footprint {int(lay.footprint[r])} (U={sm.alignment.usable}, overflow policy "
               f"{sm.packing.overflow!r})"),
              (np.add.reduceat(lens, seg_off[:-1]) != num_tokens, lambda r: "num_tokens differs from sum(seq_lens)"),
              (lay.layout_pad != layout_pad, lambda r: "layout_pad differs from the layout of its seq_lens"),
              (lay.tail_pad != g["tail_pad"], lambda r: "tail_pad differs from the layout of its seq_lens"),
              (lay.fill != g["fill_pad"], lambda r: "fill_pad differs from the layout of its seq_lens"))
    for rows, what in checks:
        if rows.any():
            fail(rows, what)
    seg_start = id_off[row_of] + cu[cu_off[row_of] + np.arange(lens.size) - seg_off[row_of]]
    top, said = ids_below if ids_below and not 0 < sm.vocab_size <= ids_below[0] else (sm.vocab_size, None)
    # the recorded max tightens the one bound the pass holds: a trainer checked its vocabulary
    # against that max at start, so an id over it is a manifest that lies, refused here
    held = max_id + 1 if max_id is not None and not 0 < top <= max_id + 1 else top
    found = _token_pass(ids, mask, id_off, seg_start, lens, np.diff(cu)[within], sm.pad_id, held,
                        num_loss.astype(np.int64))
    if found is not None:
        code, r, p = found
        at = f" position {p}" if p >= 0 else ""
        if code == 4 and held != top and 0 <= ids[id_off[r] + p] < (top or TOKEN_ID_BOUND):
            raise FormatError(f"{where} row {r}{at}: token id {int(ids[id_off[r] + p])} is above the shard's "
                              f"max_token_id {max_id} in the manifest; {fix_of(sm)}")
        if code == 4 and said:  # no damage: ids the model cannot embed (an IndexError mid-step)
            raise PacktoolConfigError(f"{where} row {r}{at}: token id {int(ids[id_off[r] + p])} is not below {said}")
        raise FormatError(f"{where} row {r}{at}: {BAD[code]}; {fix_of(sm)}")
    _check_side_fill(sm, where, g.get("side") or {}, id_off, _runs(seg_start + lens, np.diff(cu)[within] - lens))


def _check_side_fill(sm: SlabManifest, where: str, side: dict, id_off: np.ndarray, pads: np.ndarray) -> None:
    """Every pad holds its side column's fill, bit for bit as the writer puts it (-0.0 or a NaN
    is not the fill 0.0): one gather of the pad positions per side column, no column read
    beyond the reader's own. A manifest fill edited after pack shows here too. Side columns'
    lengths are the length check's; nulls were refused as the group was read."""
    for c in sm.side_columns:
        if c.name not in side or not np.array_equal(side[c.name][1], id_off):
            continue
        vals = side[c.name][0]
        got = np.ascontiguousarray(vals[pads])
        isz = f"i{got.dtype.itemsize}"
        bad = got.view(isz) != np.asarray(c.fill, got.dtype).view(isz)
        bad = bad.any(axis=1) if bad.ndim > 1 else bad
        if bad.any():
            p = int(pads[np.flatnonzero(bad)[0]])
            r = int(np.searchsorted(id_off, p, "right") - 1)
            raise FormatError(f"{where} row {r} position {p - int(id_off[r])}: side column {c.name!r} holds "
                              f"{vals[p].tolist()} on a pad, where the manifest's fill is {c.fill}; {fix_of(sm)}")


def check_segment_counts(sm: SlabManifest, cat: dict[str, np.ndarray]) -> None:
    """source_index, chunk_index and source_offset hold as many entries in every slab (`cat`: what
    the reader's open scan read, `n_seg`, `chunk_counts`, `source_offset_counts` per slab): the
    coverage check pairs them entry by entry, and seq_lens is held to the same count as each row
    group is decoded. Then every segment is real or a trailing fixed-length fill by those fields
    (`open_rules.segment_fields`), which check_group holds seq_lens to."""
    for col, key in (("chunk_index", "chunk_counts"), ("source_offset", "source_offset_counts")):
        if key not in cat:  # source_offset: unread with the checks off
            continue
        bad = cat["n_seg"] != cat[key]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FormatError(f"{slab_at(sm, cat, i)}: source_index holds {int(cat['n_seg'][i])} entries, {col} "
                              f"{int(cat[key][i])}: one entry per segment each; {fix_of(sm)}")
    found = segment_fields(cat, sm.alignment.fixed_length)
    if found is not None:
        raise FormatError(f"{slab_at(sm, cat, found[0])}: {found[1]}; {fix_of(sm)}")


def check_coverage(sm: SlabManifest, cat: dict[str, np.ndarray]) -> None:
    """Every source row once, its chunks numbered 0, 1, ...: a slab's segment copied over
    another (same length, same counts) is trained on twice and the other never. A few bytes per
    segment (`cat`: source_index and chunk_index's values), read with the scalars at open."""
    source, chunk = cat["source_index"], cat["chunk_index"]
    real = source >= 0
    cov = coverage(source[real], chunk[real])
    s, c = cov.source, cov.chunk
    if c.size and c.max() > 0 and "chunks" not in OVERFLOW_FIGURES[sm.packing.overflow]:
        j = int(np.argmax(c))  # planning's own word on which policies cut a sequence into chunks
        raise FormatError(f"{sm.path}: source row {int(s[j])} is cut into chunks (chunk {int(c[j])}), but the output "
                          f"was packed with overflow policy {sm.packing.overflow!r}, which cuts none; {fix_of(sm)}")
    if cov.first_break is not None:
        j, twice, want = cov.first_break
        what = "appears twice" if twice else f"is numbered {int(c[j])}, expected {want}"
        raise FormatError(f"{sm.path}: source row {int(s[j])} chunk {int(c[j])} {what} (a segment duplicated, "
                          f"dropped or renumbered); {fix_of(sm)}")
    n_seq = sm.raw["stats"]["sequences"]  # a count, never null: slabs.fields (S33-3: null skipped this)
    rows = int(cov.rows.size)
    if rows != n_seq or (rows and (s[0] != 0 or s[-1] != n_seq - 1)):
        held = f"{rows} distinct source rows in {int(s[0])}..{int(s[-1])}" if rows else "no source row"
        raise FormatError(f"{sm.path}: the slabs hold {held}, the manifest says {n_seq} sequences; {fix_of(sm)}")

"""The rules `slabs.check` holds at open over what the reader's open scan read (FORMAT.md, "What a
reader checks"): each segment's identity fields, and the DP fields (`plan_breaks`: the one owner
of those rules, which verify and a plan file's inspection ask too). Each gives its break(s) by
slab, in on-disk order; `slabs.check` names the shard and row and raises. Pure numpy over a few
values per slab or segment: no column is read for them that the scan does not read anyway (its
check-only columns, `slabs.reader.NULLS_ONLY`).

And the one rule on what a listed shard may be on disk (`linked_shard`), which every reader
(`slabs.check.check_output`) and `verify` ask.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from packtool.storage import is_uri


NO_REAL_SEGMENT = "the slab holds no real segment: nothing to train, which pack never writes"


def no_real_segment(n_seg: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """Per slab, whether it holds no real segment (`n_seg` segments per slab, `fill` per segment:
    the fixed-length fill, source_index -1): none at all, or the fill alone. The one rule for a
    slab of nothing to train, said in NO_REAL_SEGMENT's words by verify (its `segment_fields`)
    and every reader (at open here, and as a row group is decoded): S50B-1, verify passed a slab
    every reader then called damaged."""
    slab_of = np.repeat(np.arange(n_seg.size), n_seg)
    return np.bincount(slab_of[~np.asarray(fill, bool)], minlength=n_seg.size) < 1


def segment_fields(cat: dict[str, np.ndarray], fixed_length: int | None) -> tuple[int, str] | None:
    """Every segment real (source_index >= 0, chunk_index >= 0, source_offset >= 0) or the trailing
    fill of a fixed-length slab (source_index -1, chunk_index -1): verify's `segment_fields`; then
    every slab holds a real one (`no_real_segment`). Entries per slab are already held equal
    (`check_segment_counts`); `source_offset` is absent when the scan did not read it."""
    src, chunk, off = cat["source_index"], cat["chunk_index"], cat.get("source_offset")
    starts, n_seg = cat["segments"][:-1], cat["n_seg"]
    if not src.size:
        return (0, f"{NO_REAL_SEGMENT} (no segment at all)") if n_seg.size else None
    last = np.zeros(src.size, bool)
    last[(starts + n_seg - 1)[n_seg > 0]] = True
    fill = src < 0
    bad = np.where(fill, (chunk != -1) | ~last | (fixed_length is None), chunk < 0)
    if off is not None and off.size == src.size:
        bad |= ~fill & (off < 0)
    if not bad.any():
        empty = no_real_segment(n_seg, fill)
        if not empty.any():
            return None
        slab = int(np.flatnonzero(empty)[0])
        return slab, f"{NO_REAL_SEGMENT} ({'only the fixed-length fill' if n_seg[slab] else 'no segment at all'})"
    k = int(np.flatnonzero(bad)[0])
    slab = int(np.searchsorted(cat["segments"], k, "right") - 1)
    shown = f" source_offset {int(off[k])}" if off is not None and off.size == src.size else ""
    why = "the output has no --fixed-length fill" if fill[k] and fixed_length is None else \
        "a fill is the slab's last segment alone" if fill[k] and not last[k] else "a fill has chunk_index -1"
    return slab, (f"segment {k - int(starts[slab])} has source_index {int(src[k])} chunk_index {int(chunk[k])}{shown}: "
                  f"neither a real segment (source_index, chunk_index and source_offset >= 0) nor the trailing "
                  f"fill of a fixed-length slab (source_index -1, chunk_index -1)" + (f"; {why}" if fill[k] else ""))


class Break(NamedTuple):
    slab: int  # the slab, in on-disk order
    why: str  # the rule and how the slab breaks it (no location: each caller names the slab its way)
    found: int | None = None
    expected: int | None = None
    rule: str = "dp"  # verify's check: "slab_index" or "dp"


DP_FIELDS = ("slab_index", "dp_rank", "step", "microbatch")


def plan_breaks(slab_index: np.ndarray | None, rank: np.ndarray, step: np.ndarray, microbatch: np.ndarray,
                dp: int, known: dict[str, np.ndarray] | None = None) -> list[Break]:
    """The rules of the DP fields (FORMAT.md: `dp_rank < dp`; under a DP plan, dp > 1, every rank as
    many slabs, each (step, dp_rank, microbatch) once, steps never decreasing on disk; slab_index a
    permutation of 0..n-1; without a plan each slab micro-batch 0 of its own step, numbered by its
    slab_index): each broken rule's first break, in the order a reader refuses them (it raises the
    first; verify reports them all). The one owner of these rules: the readers (`slabs.check`),
    verify (`verification.cover`) and a plan file's inspection (`inspection.planned`, no
    slab_index) ask it. `known` (per field, where its value is known: verify's nulls, each said
    on its own): a rule is held over the known values and fails only where no values in place
    of the nulls could keep it. The dataset follows the plan's steps and ranks: a rank short of
    slabs idles through steps, a repeated micro-batch trains twice in one step."""
    n = rank.size
    k = {f: np.ones(n, bool) if known is None or f not in known else np.asarray(known[f], bool)
         for f in DP_FIELDS}
    out = np.flatnonzero(k["dp_rank"] & ((rank < 0) | (rank >= max(dp, 1))))
    breaks = []
    if out.size:  # every other plan rule counts slabs per rank: none holds without the ranks
        i = int(out[0])
        more = f" (and {out.size - 1} slab(s) more)" if out.size > 1 else ""
        breaks.append(Break(i, f"dp_rank {int(rank[i])} is outside 0..{max(dp, 1) - 1} of the plan's dp={dp}{more}",
                            int(rank[i]), dp))
    elif dp > 1:
        breaks += _plan(rank, step, microbatch, dp, k)
    if slab_index is not None:
        found = _slab_index(slab_index, k["slab_index"])
        breaks += [found] if found else []
        if dp <= 1:  # a step is held to its slab_index only where slab_index holds
            at = np.flatnonzero(k["step"] & k["microbatch"] & k["slab_index"])
            found = _no_plan(step[at], microbatch[at], slab_index[at], found is None)
            breaks += [found._replace(slab=int(at[found.slab]))] if found else []
    return breaks


def _slab_index(idx: np.ndarray, known: np.ndarray) -> Break | None:
    """slab_index a permutation of 0..n-1 over the n slabs, or (some null) its known values distinct
    and in that range: a slab row copied or dropped and the rows re-signed leave a repeat or a gap."""
    n, at = idx.size, np.flatnonzero(known)
    v = idx[at]
    inside = (v >= 0) & (v < n)
    seen = np.bincount(v[inside], minlength=n)
    bad = ~inside
    bad[inside] = seen[v[inside]] > 1
    if not bad.any():
        return None
    j = int(np.flatnonzero(bad)[0])
    what = f"outside 0..{n - 1}" if not inside[j] else "held by another slab too"
    nulls = f" (the other {n - at.size} null)" if at.size < n else ""
    return Break(int(at[j]), f"slab_index {int(v[j])} is {what}: slab_index is a permutation of 0..{n - 1}{nulls} "
                             f"(a slab row dropped or duplicated)", int(v[j]), rule="slab_index")


def _no_plan(step: np.ndarray, microbatch: np.ndarray, slab_index: np.ndarray, steps: bool) -> Break | None:
    """Without a DP plan (dp = 1): each slab is its own step, the one its slab_index numbers, and
    micro-batch 0 of it, as every packtool writer makes it (S44-7: an edited step or microbatch was
    held to nothing at dp=1)."""
    held = (("step", step, slab_index),) if steps else ()
    for name, got, want in (*held, ("microbatch", microbatch, np.zeros_like(microbatch))):
        bad = np.flatnonzero(got != want)
        if bad.size:
            i = int(bad[0])
            return Break(i, f"{name} {int(got[i])} where it is {int(want[i])}: without a DP plan (dp=1) each slab "
                            f"is micro-batch 0 of its own step, numbered by its slab_index", int(got[i]), int(want[i]))
    return None


def _plan(rank, step, microbatch, dp: int, k: dict) -> list[Break]:
    """The DP plan's rules (dp > 1, ranks in [0, dp)), each one's first break."""
    n, found = rank.size, []
    neg = np.flatnonzero(k["microbatch"] & (microbatch < 0))
    if neg.size:
        i = int(neg[0])
        found.append(Break(i, f"microbatch {int(microbatch[i])} is negative: a micro-batch of a step is numbered "
                              f"from 0", int(microbatch[i]), 0))
    ranks = np.flatnonzero(k["dp_rank"])
    per_rank = np.bincount(rank[ranks], minlength=dp)
    if ranks.size == n and per_rank.min() != per_rank.max():
        r = int(np.argmin(per_rank))
        i = int(np.flatnonzero(rank == r)[0]) if per_rank[r] else 0
        found.append(Break(i, f"DP rank {r} holds {int(per_rank[r])} slabs, another {int(per_rank.max())}: every "
                              f"rank of the dp={dp} plan holds as many", int(per_rank[r]), int(per_rank.max())))
    elif ranks.size < n and (n % dp or per_rank.max() > n // dp):  # the null ranks cannot even them out
        r = int(np.argmax(per_rank))
        i = n - 1 if n % dp else int(ranks[rank[ranks] == r][0])
        found.append(Break(i, f"{n} slabs, DP rank {r} holding {int(per_rank[r])} of the known ones: every rank "
                              f"of the dp={dp} plan holds as many, whatever the null ranks are", n, -(-n // dp) * dp))
    every = np.flatnonzero(k["step"] & k["dp_rank"] & k["microbatch"])
    order = every[np.lexsort((microbatch[every], rank[every], step[every]))]
    s, r, m = step[order], rank[order], microbatch[order]
    twice = np.flatnonzero((s[1:] == s[:-1]) & (r[1:] == r[:-1]) & (m[1:] == m[:-1]))
    if twice.size:
        i = int(order[twice[0] + 1])
        found.append(Break(i, f"(step {int(step[i])}, dp_rank {int(rank[i])}, microbatch {int(microbatch[i])}) is "
                              f"another slab's too: each micro-batch of the DP plan is one slab"))
    at = np.flatnonzero(k["step"])
    back = np.flatnonzero(np.diff(step[at]) < 0)
    if back.size:
        # plan numbers steps in on-disk order, so a consumer reading shards in order runs step 0,
        # then step 1, ... on every rank together
        j, i = int(at[back[0]]), int(at[back[0] + 1])
        found.append(Break(i, f"step {int(step[i])} follows step {int(step[j])} on disk: the plan's steps are in "
                              f"on-disk order", int(step[i]), int(step[j])))
    return found


class Coverage(NamedTuple):
    order: np.ndarray  # the segment behind each sorted position (by source row, then chunk)
    source: np.ndarray  # source rows, sorted
    chunk: np.ndarray  # their chunk numbers, in the same order
    rows: np.ndarray  # the distinct source rows, ascending
    first_break: tuple[int, bool, int] | None  # (sorted position, the chunk twice?, the chunk expected)
    # (sorted position, the offset expected) of the first chunk that does not start where its row's
    # previous chunk ended (chunk 0 at 0): asked only with `offset` and `length`
    first_gap: tuple[int, int] | None = None


def coverage(source: np.ndarray, chunk: np.ndarray, offset: np.ndarray | None = None,
             length: np.ndarray | None = None) -> Coverage:
    """Every source row once, its chunks numbered 0, 1, ...: the one rule a packed output's real
    segments (`slabs.check.check_coverage`) and a plan file's segments (`inspection.planned`)
    are held to; each caller words its break and holds the rows to its own count. With each
    segment's `offset` in its source row and its `length`, its chunks tile the row too (each
    starts where the previous one ended): a row's length is then the sum of its chunks'. verify
    reports every break, with token offsets (`verification.cover`). No segments: no break, no
    rows (each caller holds that to its own count)."""
    order = np.lexsort((chunk, source))
    s, c = source[order], chunk[order]
    same = np.concatenate(([False], s[1:] == s[:-1]))[:s.size]  # [False] alone was one entry too many
    want = np.where(same, np.concatenate(([0], c[:-1] + 1))[:s.size], 0)
    bad = np.flatnonzero(c != want)
    first = None
    if bad.size:
        j = int(bad[0])
        first = (j, bool(same[j] and c[j] == c[j - 1]), int(want[j]))
    gap = None
    if offset is not None and length is not None:
        o, n = offset[order], length[order]
        want_o = np.where(same, np.concatenate(([0], o[:-1] + n[:-1]))[:s.size], 0)
        bad = np.flatnonzero(o != want_o)
        if bad.size:
            gap = (int(bad[0]), int(want_o[bad[0]]))
    return Coverage(order, s, c, s[~same], first, gap)


class Link(NamedTuple):
    target: str  # where the link leads, resolved
    refused: str | None  # why no reader reads through it (the fix included); None: harmless


def linked_shard(folder: str, name: str, what: str = "shard") -> Link | None:
    """Listed shard `name` of the local output `folder` when it is a symbolic link (None when it is
    not, or on an object store, which has none). A shard is a regular file of the output folder:
    a link to one inside it reads that file's bytes, checked like any shard's (harmless: verify
    notes it, since `pack --overwrite` will not replace such an output); a link out of the folder
    or to nothing is refused, by every reader and by verify alike. A copy of the folder would lose
    the target, and a file outside is no part of what was packed, whatever its checksum says now.
    A hard link is the file itself: its bytes are checked like any shard's (size, checksum).
    The manifest is held to the same rule (`what` "manifest": slabs.format.read_manifest): it
    says what the shards are, so a reader reads no manifest from elsewhere either."""
    path = os.path.join(folder, name)
    if is_uri(folder) or not os.path.islink(path):
        return None
    target, home = os.path.realpath(path), os.path.realpath(folder)
    if not os.path.exists(target):
        return Link(target, f"a symbolic link to {target}, which does not exist (a dangling link); put the {what} "
                            f"itself back, or re-run `packtool pack`")
    if os.path.commonpath([target, home]) != home:
        return Link(target, f"a symbolic link to {target}, outside the output folder (a {what} is a file of the "
                            f"folder: a reader reads no file elsewhere); copy the file itself in "
                            f"(cp --remove-destination), or re-run `packtool pack`")
    if not os.path.isfile(target):
        return Link(target, f"a symbolic link to {target}, which is not a regular file; put the {what} itself back, "
                            f"or re-run `packtool pack`")
    return Link(target, None)

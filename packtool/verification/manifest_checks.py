"""What a packed output's manifest says, held to what its shards gave (`verify`'s checks of the
manifest itself and of every whole-output figure): the manifest's config and provenance record
readable (`check_manifest`), each shard's entry (bytes, checksum, rows, tokens, max_token_id)
against that shard's result (`check_shard_entry`), and the stats against the shards' sums, then
each source row's coverage and the DP fields (`check_totals`, through `cover`). `run` asks them
once every shard is checked.
"""
from __future__ import annotations

import numpy as np

from packtool.align import Alignment
from packtool.side import side_columns_from_manifest
from packtool.slabs.format import FormatError, manifest_config, shard_names
from packtool.tokenize.checksum import CHECKSUMS, SHARD_CHECKSUM
from packtool.verification.job import ShardResult
from packtool.verification.problems import ProblemLog
from packtool.verification.source import recorded_tokenize

STAT_KEYS = ("real_tokens", "loss_tokens", "physical_tokens", "layout_pad", "tail_pad", "fill_pad", "slack")


def check_manifest(man: dict, log: ProblemLog):
    """(alignment, overflow policy, dp, whether the provenance record is well-formed); a
    manifest whose config cannot be read gives (None, None, None, ...)."""
    from packtool.slabs.provenance import provenance_problems
    bad_record = provenance_problems(man)
    for message in bad_record:
        log.add("manifest", message)
    try:
        recorded_tokenize(man)  # verify --source reads it: damage there is found without it too
    except FormatError as e:
        log.add("manifest", str(e))
        bad_record.append(str(e))
    try:
        align, packing = manifest_config(man)
        shard_names(man)
    except FormatError as e:
        log.add("manifest", str(e))
        return None, None, None, not bad_record
    from packtool.verification.declared import check_declared
    check_declared(man, packing.overflow, log)
    return align, packing.overflow, packing.dp, not bad_record


def checksum_of(entry: dict) -> str:
    """The algorithm a manifest shard entry was hashed with (older outputs: sha256)."""
    return next((a for a in CHECKSUMS if a in entry), SHARD_CHECKSUM)


def check_shard_entry(entry: dict, res: ShardResult, log: ProblemLog) -> None:
    name = res.name
    if entry.get("bytes") != res.bytes:
        hint = " (truncated)" if isinstance(entry.get("bytes"), int) and res.bytes < entry["bytes"] else ""
        log.add("shard_size", f"shard {name} has {res.bytes} bytes, the manifest says {entry.get('bytes')}{hint}",
                shard=name, expected=entry.get("bytes"), found=res.bytes)
    alg = checksum_of(entry)
    if entry.get(alg) != res.digest:
        # whole digests: two that differ in the last digit must not read as equal
        log.add("checksum", f"shard {name} {alg} is {res.digest}, the manifest says "
                f"{entry.get(alg)}: the file (or the manifest's entry for it) changed after packing "
                f"(flipped or edited bytes)", shard=name, expected=entry.get(alg), found=res.digest)
    if res.readable:
        counted = (("rows", res.rows),) if res.skipped else (  # skipped rows' tokens are not counted
            ("rows", res.rows), ("tokens", res.totals.get("physical_tokens")),
            ("loss_tokens", res.totals.get("loss_tokens")))
        for key, got in counted:
            if key in entry and entry[key] != got:
                log.add("shard_counts", f"shard {name} holds {got} {key.replace('_', ' ')}, the manifest "
                        f"says {entry[key]}", shard=name, expected=entry[key], found=got)
        # a record above the shard's ids (one below is token_id_range, per slab: every reader
        # refuses those groups) would size a trainer's vocabulary by a made-up id
        top, said = res.top_id or 0, entry.get("max_token_id")  # 0 for a shard of no tokens (FORMAT.md)
        if type(said) is int and said > top:
            log.add("shard_counts", f"shard {name}'s largest token id is {top}, the manifest says max_token_id "
                    f"{said}: the manifest's entry changed after packing; re-run `packtool pack`", shard=name,
                    expected=said, found=top)


def check_totals(man, align: Alignment, policy: str, dp: int, results, log, source_dir, notes) -> None:
    slabs = {k: np.concatenate([r.slabs[k] for r in results]) for k in results[0].slabs}
    nulls = {k: np.concatenate([r.nulls[k] for r in results]) for k in results[0].nulls}
    unknown = _null_scalars(nulls, notes)
    shards = ([r.name for r in results], [r.slabs["slab_index"].size for r in results])
    from packtool.verification.cover import check_coverage, check_dp
    skipped = sum(r.skipped for r in results)
    if skipped:  # their segments and tokens are unknown: every count below would be short by them
        check_dp(slabs, dp, log, nulls, shards)  # their scalars are counted
        notes.append(f"{skipped} slab(s) with inconsistent array lengths or nulls (the array_length and schema "
                     f"problems) were not checked further; the shard token counts, manifest stats and coverage "
                     f"checks, which need their segments, were skipped")
        return
    stats = man.get("stats") or {}
    got = {k: sum(int(r.totals[k]) for r in results) for k in STAT_KEYS}
    segs = {k: np.concatenate([r.segments[k] for r in results]) for k in results[0].segments}
    shard_of = np.repeat(np.arange(len(results)), [r.segments["source"].size for r in results])
    got["slabs"] = int(slabs["slab_index"].size)
    got["segments"] = int(segs["source"].size)
    got["lower_bound"] = align.lower_bound(segs["length"])
    got["l2_bound"] = align.l2_bound(segs["length"])
    for k, v in got.items():
        if k in stats and stats[k] != v and k not in unknown:
            log.add("manifest_stats", f"the manifest's stats.{k} is {stats[k]}, the shards give {v}",
                    expected=v, found=stats[k])
    names = [r.name for r in results]
    n_seq = stats.get("sequences")
    singletons = None if "singletons" in unknown else int(slabs["singleton"].sum())
    check_coverage(segs, shard_of, names, align, policy, n_seq, stats.get("overflow") or {},
                   singletons, source_dir, log, notes, stats.get("changes") or {})
    check_dp(slabs, dp, log, nulls, shards)
    side = side_columns_from_manifest(man.get("side_columns"))
    if side:
        from packtool.verification.side import check_nonfinite
        totals = {}
        for r in results:
            for k, v in r.totals.items():
                totals[k] = totals.get(k, 0) + int(v)
        check_nonfinite(stats, side, totals, policy, log, notes)


# the whole-output sums a null scalar column leaves unknown (the pads summed, and through
# `singleton` which slabs count as singletons and so the slack of the others)
_SUMS_OF = {"layout_pad": ("layout_pad",), "tail_pad": ("tail_pad",), "fill_pad": ("fill_pad",),
            "singleton": ("slack", "singletons")}


def _null_scalars(nulls: dict, notes: list[str]) -> set[str]:
    """The sums the null scalars leave unknown (their checks are skipped), said once in a note."""
    cols = [c for c, rows in nulls.items() if rows.any()]
    if not cols:
        return set()
    slabs = int(np.logical_or.reduce([nulls[c] for c in cols]).sum())
    notes.append(f"{slabs} slab(s) hold a null in {', '.join(cols)} (the schema problems): the checks that "
                 f"read those values skipped those slabs, and the sums they enter were not held to the "
                 f"manifest; the slabs' other columns were checked")
    return {k for c in cols for k in _SUMS_OF.get(c, ())}

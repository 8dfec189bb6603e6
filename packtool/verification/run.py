"""`packtool verify`: check a packed output against FORMAT.md and the alignment model.

The manifest is read and checked first; then every shard is checked in a process pool
(`verification.shard.check_shard`, bounded memory, runs of row groups per task); last come the checks
that need every shard: counts against the manifest, each source row exactly once (or as
its overflow policy says), bounds, DP fields. With a source (the same inputs and
tokenization as `pack`), every segment's tokens are compared with its source row, and the
manifest's provenance record with the source (verification/source.py, which also re-reads it).
"""
from __future__ import annotations

import os
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace

import numpy as np

from packtool.align import Alignment
from packtool.slabs.format import FormatError, NotAnOutputError, manifest_config, read_manifest, shard_names
from packtool.slabs.names import LEGACY_MANIFEST, MANIFEST, join, manifest_file
from packtool.slabs.open_rules import linked_shard
from packtool.side import side_columns_from_manifest
from packtool.storage import bucket_gone, is_file, reading
from packtool.tokenize.checksum import CHECKSUMS, SHARD_CHECKSUM
from packtool.output.unchanged import check_unchanged, folder_state
from packtool.verification.problems import Problem, ProblemLog
from packtool.verification.job import ShardJob, ShardResult
from packtool.verification.shard import check_shard
from packtool.verification.unlisted import check_unlisted
from packtool.workers import cores
from packtool.verification.source import (  # noqa: F401  (verify --source's side; importable from here too)
    recorded_tokenize,
    source_store,
    source_tokenize_config,
    source_tokenize_for,
)

STAT_KEYS = ("real_tokens", "loss_tokens", "physical_tokens", "layout_pad", "tail_pad", "fill_pad", "slack")


@dataclass
class VerifyReport:
    directory: str
    ok: bool
    shards: int
    slabs: int
    physical_tokens: int
    real_tokens: int
    loss_tokens: int
    source_checked: bool
    seconds: float
    counts: dict  # check -> number of problems
    problems: list[Problem] = field(default_factory=list)  # the first few of each check
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("directory", "ok", "shards", "slabs", "physical_tokens",
                                           "real_tokens", "loss_tokens", "source_checked", "seconds",
                                           "counts", "notes")}
        d["problems"] = [p.to_dict() for p in self.problems]
        return d


def verify(directory: str, source_dir: str | None = None, workers: int | None = None,
           max_problems: int = 20, batch_rows: int = 128,
           source_fingerprint: str | None = None, progress: bool = False,
           source_tokenize=None, source_files: list[str] | None = None) -> VerifyReport:
    # a store output's every request names `directory` when the store stops answering half way
    before = folder_state(directory)  # a pack --overwrite of the same folder may swap it under us
    try:
        with reading(directory if isinstance(directory, str) else "", "directory"):
            report = _verify(directory, source_dir, workers, max_problems, batch_rows, source_fingerprint,
                             progress, source_tokenize, source_files)
    except Exception:  # a shard gone or cut mid-swap (FileNotFoundError, Arrow's) is the swap too
        check_unchanged(directory, before)  # a folder gone mid-swap is the swap, not a bad argument
        raise
    check_unchanged(directory, before)
    return report


def _verify(directory, source_dir, workers, max_problems, batch_rows, source_fingerprint, progress,
            source_tokenize, source_files) -> VerifyReport:
    """Check `directory`; `source_dir` is a FlatTokens store of the tokenized source rows
    (see `packtool.tokenize.flat_tokens`, `source_store`), or None to check the output on its own.
    With a source, the manifest's provenance record is held to it (verification/source.py): read
    from the tokenized cache behind `source_dir` when it is one (`source_store`'s), else from
    `source_fingerprint`, `source_tokenize` (TokenizeConfig) and `source_files` (resolved paths). A `directory` that is
    not there or is a file raises NotAnOutputError; everything found in a folder is reported."""
    from packtool.params import arguments, expect
    from packtool.tokenize.config import TokenizeConfig
    expect(source_tokenize, TokenizeConfig, "verify", "source_tokenize", optional=True)
    directory, source_dir, workers, max_problems, batch_rows, source_fingerprint, progress, source_files = arguments(
        directory=directory, source_dir=source_dir, workers=workers, max_problems=max_problems,
        batch_rows=batch_rows, source_fingerprint=source_fingerprint, progress=progress,
        source_files=source_files)
    _check_source_args(source_dir, source_fingerprint, source_tokenize, source_files)
    t0 = time.perf_counter()
    log = ProblemLog(max_problems)
    notes: list[str] = []
    try:
        man = read_manifest(directory, "directory")
    except NotAnOutputError:  # nothing there to check: a bad argument, not a failed check
        raise
    except FormatError as e:
        log.add("manifest", f"{e}")
        return _report(directory, log, notes, [], source_dir, t0)
    align, policy, dp, record_ok = _check_manifest(man, log)
    if not record_ok and source_dir is not None:
        notes.append("the manifest's provenance record is damaged (see the problems), so it was not compared "
                     "with the source; the tokens were")
    elif source_dir is not None or source_fingerprint:
        from packtool.verification.source import check_input_record, source_record
        src = source_record(source_dir, source_fingerprint, source_tokenize, source_files)
        if src is not None:
            check_input_record(man, src, log, notes)
        if source_dir is not None:
            from packtool.verification.declared import check_skipped_with_source
            check_skipped_with_source(man, source_dir, log, notes)
    if align is None:
        return _report(directory, log, notes, [], source_dir, t0)
    listed = shard_names(man)  # checked by _check_manifest: plain names inside `directory`
    links = {f: linked_shard(directory, f) for f in listed}
    present = [f for f in listed if is_file(join(directory, f)) and not (links[f] and links[f].refused)]
    if len(present) < len(listed) and (gone := bucket_gone(join(directory, MANIFEST))) is not None:
        raise gone  # the bucket deleted since the manifest was read: no shard is "missing" from an output
    for f in listed:
        if links[f] and links[f].refused:  # the readers' rule (slabs/open_rules.py): what they refuse
            log.add("shard_link", f"shard {f} is {links[f].refused}", shard=f)
        elif f not in present:
            log.add("shard_missing", f"shard {f} is listed in the manifest but missing from {directory}",
                    shard=f)
    named = os.path.basename(manifest_file(directory) or MANIFEST)  # the manifest: the shards' rule
    notes += _linked_shards({**links, named: linked_shard(directory, named, "manifest")})
    legacy = named == LEGACY_MANIFEST
    check_unlisted(directory, listed, legacy, log, notes)
    tok = man.get("tokenizer") or {}
    side = side_columns_from_manifest(man.get("side_columns"))
    source_side, side_source = (), ()
    if source_dir is not None and side:  # compared with the source's values, or a note says which were not
        from packtool.verification.side import source_side_columns
        source_side, side_source = source_side_columns(source_dir, side, log, notes)
    workers = max(1, workers or cores())
    by_name = dict(zip(listed, man["shards"]))
    base = [ShardJob(join(directory, f), f, align, policy, int(tok.get("pad_id") or 0),
                     tok.get("vocab_size"), source_dir, batch_rows, max_problems,
                     checksum=_checksum_of(by_name[f]), side=side, source_side=source_side,
                     side_source=side_source, max_token_id=by_name[f].get("max_token_id"))
            for f in listed if f in present]
    from packtool.progress import bar, large
    pieces = _pieces(base, 4 * workers)
    from packtool.planning.bounds import check_processes  # before any process starts
    check_processes(min(workers, len(pieces)), "workers", workers, "verify processes")
    with bar("Verifying", len(pieces), "pieces", progress and large([j.path for j in base])) as advance:
        results = _merge_pieces(_run(pieces, workers, advance))
    for res in results:
        _check_shard_entry(by_name[res.name], res, log)
        log.merge(res.log)
    complete = len(base) == len(listed) and all(r.readable for r in results)
    if complete and results:
        _check_totals(man, align, policy, dp, results, log, source_dir, notes)
    elif not complete:
        notes.append("whole-output checks (counts, coverage, bounds, DP) skipped: a shard is "
                     "missing, unreadable or a link the readers refuse")
    elif (man.get("stats") or {}).get("slabs"):
        log.add("manifest", f"the manifest lists no shards but stats.slabs is {man['stats']['slabs']}",
                expected=man["stats"]["slabs"], found=0)
    return _report(directory, log, notes, results, source_dir, t0)


def _linked_shards(links: dict) -> list[str]:
    """A note per listed shard that is a symbolic link to a regular file inside the output folder
    (S34-8): harmless, its slabs read through it as every reader does (their rule,
    `slabs.open_rules.linked_shard`; a link out of the folder or to nothing is a problem, refused by
    the readers too), but `pack --overwrite` refuses to replace a folder whose shard is a link
    (output/owned.py). Said, so that the OK is not read as "a plain folder of files"."""
    return [f"{'shard ' * (f not in (MANIFEST, LEGACY_MANIFEST))}{f} is a symbolic link to {link.target}: readers read it (a file of the output folder), "
            f"but `pack --overwrite` will not replace this output; copy the file itself in "
            f"(cp --remove-destination)" for f, link in links.items() if link is not None and not link.refused]


def _check_source_args(source_dir, fingerprint, tokenize, files) -> None:
    """The source's record arguments describe `source_dir`: given without it they would be
    dropped (ok=True with no source compared), so they are refused at the call, as is a
    fingerprint not of the form every fingerprint has or a source file that is not there."""
    from packtool.errors import PacktoolInputError, arg
    from packtool.slabs.provenance import SHA256, is_sha256
    from packtool.storage import is_file as exists
    given = [n for n, v in (("source_fingerprint", fingerprint), ("source_tokenize", tokenize),
                            ("source_files", files)) if v is not None]
    if given and source_dir is None:
        raise PacktoolInputError(f"{arg(given[0])} describes the source, but no {arg('source_dir')} was given: "
                                 f"pass the source's flat store too (packtool.verification.source_store) or "
                                 f"leave {arg(given[0])} out")
    if fingerprint is not None and not is_sha256(fingerprint):
        raise PacktoolInputError(f"{arg('source_fingerprint', fingerprint)} is not {SHA256}: pass the "
                                 f"fingerprint source_store returned")
    for f in files or ():
        if not exists(f):
            raise PacktoolInputError(f"{arg('source_files')} names {f!r}, which is not a file: pass the "
                                     f"source's input paths as packed")


def _report(directory, log, notes, results, source_dir, t0) -> VerifyReport:
    tot = lambda k: sum(int(r.totals.get(k, 0)) for r in results)  # noqa: E731
    return VerifyReport(
        directory=directory, ok=not log, shards=len(results), slabs=sum(r.rows for r in results),
        physical_tokens=tot("physical_tokens"), real_tokens=tot("real_tokens"),
        loss_tokens=tot("loss_tokens"), source_checked=source_dir is not None,
        seconds=time.perf_counter() - t0, counts=dict(log.counts), problems=list(log.problems),
        notes=notes)


def _run(jobs: list[ShardJob], workers: int, advance=lambda n: None) -> list[ShardResult]:
    workers = min(workers, len(jobs))
    if workers <= 1:
        return [_done(check_shard(j), advance) for j in jobs]
    from packtool.workers import process_pool, stop_process_pool, submit_all
    pool = process_pool(workers)
    try:
        # never through pool.map: its generator cancels the rest when left, and a cancelled
        # call in a pool whose workers are then stopped made the pool's manager thread raise
        # InvalidStateError (a traceback after Ctrl-C)
        futures = submit_all(pool, check_shard, jobs)
        return [_done(f.result(), advance) for f in futures]
    except BrokenProcessPool as e:
        # a worker killed (out of memory, a signal): the checks do not depend on the pool,
        # so run them here rather than fail
        stop_process_pool(pool)
        from packtool.notes import note
        note(f"verify: process pool failed ({e}); checking in this process")
        return [_done(check_shard(j), advance) for j in jobs]
    except BaseException:  # Ctrl-C (or an error): no worker is left running the other pieces
        stop_process_pool(pool)
        raise


def _done(r: ShardResult, advance) -> ShardResult:
    advance(1)
    return r


def _pieces(jobs: list[ShardJob], target: int) -> list[ShardJob]:
    """Cut shards into runs of row groups so that both cores stay busy to the end, whatever
    the shard sizes; the first piece of each shard also hashes the file."""
    import pyarrow.parquet as pq
    groups = []
    for j in jobs:
        try:
            md = pq.ParquetFile(j.path).metadata
            groups.append([md.row_group(g).num_rows for g in range(md.num_row_groups)])
        except Exception:  # unreadable: one piece, check_shard reports why
            groups.append(None)
    total = sum(len(g) for g in groups if g) or 1
    out = []
    for j, g in zip(jobs, groups):
        if not g:
            out.append(j)
            continue
        k = max(1, min(len(g), round(target * len(g) / total)))
        cuts = np.linspace(0, len(g), k + 1).round().astype(int)
        rows = np.concatenate(([0], np.cumsum(g)))
        for i, (g0, g1) in enumerate(zip(cuts[:-1], cuts[1:])):
            out.append(replace(j, row_groups=(int(g0), int(g1)), row0=int(rows[g0]), hash_file=i == 0))
    return out


def _merge_pieces(results: list[ShardResult]) -> list[ShardResult]:
    merged: dict[str, ShardResult] = {}
    for r in results:
        m = merged.get(r.name)
        if m is None:
            merged[r.name] = r
            continue
        m.rows += r.rows
        m.skipped += r.skipped
        m.readable &= r.readable
        if r.top_id is not None and (m.top_id is None or r.top_id > m.top_id):
            m.top_id = r.top_id
        m.log.merge(r.log)
        for k, v in r.totals.items():
            m.totals[k] = m.totals.get(k, 0) + v
        for d, o in ((m.slabs, r.slabs), (m.segments, r.segments), (m.nulls, r.nulls)):
            for k in list(d) or list(o):
                d[k] = np.concatenate([d[k], o[k]]) if k in d else o[k]
    return list(merged.values())


def _check_manifest(man: dict, log: ProblemLog):
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


def _checksum_of(entry: dict) -> str:
    """The algorithm a manifest shard entry was hashed with (older outputs: sha256)."""
    return next((a for a in CHECKSUMS if a in entry), SHARD_CHECKSUM)


def _check_shard_entry(entry: dict, res: ShardResult, log: ProblemLog) -> None:
    name = res.name
    if entry.get("bytes") != res.bytes:
        hint = " (truncated)" if isinstance(entry.get("bytes"), int) and res.bytes < entry["bytes"] else ""
        log.add("shard_size", f"shard {name} has {res.bytes} bytes, the manifest says {entry.get('bytes')}{hint}",
                shard=name, expected=entry.get("bytes"), found=res.bytes)
    alg = _checksum_of(entry)
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


def _check_totals(man, align: Alignment, policy: str, dp: int, results, log, source_dir, notes) -> None:
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

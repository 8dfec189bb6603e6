"""`packtool verify`: check a packed output against FORMAT.md and the alignment model.

The manifest is read and checked first; then every shard is checked in a process pool
(`verification.shard.check_shard`, bounded memory, runs of row groups per task); last come the checks
that need every shard (`verification.manifest_checks`): counts against the manifest, each source row
exactly once (or as its overflow policy says), bounds, DP fields. With a source (the same inputs and
tokenization as `pack`), every segment's tokens are compared with its source row, and the
manifest's provenance record with the source (verification/source.py, which also re-reads it).
"""
from __future__ import annotations

import os
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace

import numpy as np

from packtool.slabs.format import FormatError, NotAnOutputError, read_manifest, shard_names
from packtool.slabs.names import LEGACY_MANIFEST, MANIFEST, join, manifest_file
from packtool.slabs.open_rules import linked_shard
from packtool.side import side_columns_from_manifest
from packtool.storage import bucket_gone, is_file, reading
from packtool.output.unchanged import check_unchanged, folder_state
from packtool.verification.problems import Problem, ProblemLog
from packtool.verification.job import ShardJob, ShardResult
from packtool.verification.manifest_checks import check_manifest, check_shard_entry, check_totals, checksum_of
from packtool.verification.shard import check_shard
from packtool.verification.unlisted import check_unlisted
from packtool.workers import cores
from packtool.verification.source import (  # noqa: F401  (verify --source's side; importable from here too)
    recorded_tokenize,
    source_store,
    source_tokenize_config,
    source_tokenize_for,
)


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
    align, policy, dp, record_ok = check_manifest(man, log)
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
    listed = shard_names(man)  # checked by check_manifest: plain names inside `directory`
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
                     checksum=checksum_of(by_name[f]), side=side, source_side=source_side,
                     side_source=side_source, max_token_id=by_name[f].get("max_token_id"))
            for f in listed if f in present]
    from packtool.progress import bar, large
    pieces = _pieces(base, 4 * workers)
    from packtool.planning.bounds import check_processes  # before any process starts
    check_processes(min(workers, len(pieces)), "workers", workers, "verify processes")
    with bar("Verifying", len(pieces), "pieces", progress and large([j.path for j in base])) as advance:
        results = _merge_pieces(_run(pieces, workers, advance))
    for res in results:
        check_shard_entry(by_name[res.name], res, log)
        log.merge(res.log)
    notes += _empty_shards(results)
    complete = len(base) == len(listed) and all(r.readable for r in results)
    if complete and results:
        check_totals(man, align, policy, dp, results, log, source_dir, notes)
    elif not complete:
        notes.append("whole-output checks (counts, coverage, bounds, DP) skipped: a shard is "
                     "missing, unreadable or a link the readers refuse")
    elif (man.get("stats") or {}).get("slabs"):
        log.add("manifest", f"the manifest lists no shards but stats.slabs is {man['stats']['slabs']}",
                expected=man["stats"]["slabs"], found=0)
    return _report(directory, log, notes, results, source_dir, t0)


def _empty_shards(results) -> list[str]:
    """A listed shard of 0 rows is valid (pack writes none, a re-sharding or merge tool may; every
    packtool reader reads it as nothing), but the plain path HF.md and FORMAT.md name,
    `datasets.load_dataset("parquet", data_dir=...)`, fails on it ("BatchSize must be greater
    than 0"): said, so an OK does not promise that path (RB-7)."""
    empty = sorted(r.name for r in results if r.readable and r.rows == 0)
    if not empty:
        return []
    more = f" and {len(empty) - 3} more" if len(empty) > 3 else ""
    return [f"{len(empty)} shard(s) hold no rows ({', '.join(empty[:3])}{more}): packtool's readers read them as "
            f"nothing, but datasets.load_dataset(\"parquet\", data_dir=...) fails on a file of no rows; read this "
            f"output with SlabDataset(...).to_hf(), which leaves them out"]


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
    from packtool.workers import running
    workers = min(workers, len(jobs))
    with running(max(workers, 1)):
        return _run_in(jobs, workers, advance)


def _run_in(jobs: list[ShardJob], workers: int, advance) -> list[ShardResult]:
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

"""`packtool verify`: check a packed output against FORMAT.md and the alignment model.

The manifest is read and checked first; then every shard is checked in a process pool
(`verify_shard.check_shard`, bounded memory, runs of row groups per task); last come the checks
that need every shard: counts against the manifest, each source row exactly once (or as
its overflow policy says), bounds, DP fields. With a source (the same inputs and
tokenization as `pack`), every segment's tokens are compared with its source row.
"""
from __future__ import annotations

import os
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace

import numpy as np

from packtool.align import Alignment
from packtool.slabs.format import (
    LEGACY_MANIFEST,
    MANIFEST,
    FormatError,
    NotAnOutputError,
    in_flight,
    join,
    manifest_config,
    manifest_file,
    read_manifest,
    shard_names,
    stray_entries,
)
from packtool.side import side_columns_from_manifest
from packtool.storage import is_file
from packtool.tokenize.checksum import CHECKSUMS, SHARD_CHECKSUM
from packtool.verification.problems import Problem, ProblemLog
from packtool.verification.shard import ShardJob, ShardResult, check_shard

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
    """Check `directory`; `source_dir` is a FlatTokens store of the tokenized source rows
    (see `packtool.tokenize.flat_tokens`, `source_store`), or None to check the output on its own.
    `source_tokenize` (TokenizeConfig) and `source_files` (resolved paths), when given, let a
    fingerprint mismatch name what differs from the manifest's record. A `directory` that is
    not there or is a file raises NotAnOutputError; everything found in a folder is reported."""
    from packtool.params import arguments, expect
    from packtool.tokenize.config import TokenizeConfig
    expect(source_tokenize, TokenizeConfig, "verify", "source_tokenize", optional=True)
    directory, source_dir, workers, max_problems, batch_rows, source_fingerprint, progress, source_files = arguments(
        directory=directory, source_dir=source_dir, workers=workers, max_problems=max_problems,
        batch_rows=batch_rows, source_fingerprint=source_fingerprint, progress=progress,
        source_files=source_files)
    t0 = time.perf_counter()
    log = ProblemLog(max_problems)
    notes: list[str] = []
    try:
        man = read_manifest(directory)
    except NotAnOutputError:  # nothing there to check: a bad argument, not a failed check
        raise
    except FormatError as e:
        log.add("manifest", f"{e}")
        return _report(directory, log, notes, [], source_dir, t0)
    align, policy, dp = _check_manifest(man, log)
    want_fp = (man.get("input") or {}).get("fingerprint")
    if source_fingerprint and want_fp and source_fingerprint != want_fp:
        notes.append(f"the source and tokenization options give input fingerprint "
                     f"{source_fingerprint}, the manifest says {want_fp}: not the same "
                     f"files or options as `pack`{_what_differs(man, source_tokenize, source_files)} "
                     f"(differences below would follow from that)")
    if align is None:
        return _report(directory, log, notes, [], source_dir, t0)
    listed = shard_names(man)  # checked by _check_manifest: plain names inside `directory`
    present = [f for f in listed if is_file(join(directory, f))]
    for f in listed:
        if f not in present:
            log.add("shard_missing", f"shard {f} is listed in the manifest but missing from {directory}",
                    shard=f)
    legacy = os.path.basename(manifest_file(directory) or "") == LEGACY_MANIFEST
    flying = in_flight(directory)
    strays = stray_entries(directory, listed)
    if flying & set(strays):
        notes.append(f"{len(flying & set(strays))} shard(s) named by a packtool run's intent in {directory} "
                     f"(a run writing, deleting what it replaced, or killed): not part of this output, never "
                     f"read through the manifest (a plain Parquet reader of the prefix meets them until the next pack "
                     f"to it removes a dead run's)")
    for f in strays:
        if f in flying:
            continue
        if legacy and f == LEGACY_MANIFEST:
            notes.append(f"{LEGACY_MANIFEST} is an older packtool's manifest name: packtool reads it, "
                         f"but pq.read_table/pyarrow.dataset/datasets read it as a shard and fail; "
                         f"rename it to {MANIFEST} (or re-pack) for a plain Parquet dataset")
        else:
            log.add("shard_extra", f"{f} is in {directory} but not listed in the manifest (a stray or "
                    f"duplicated file: pq.read_table, pyarrow.dataset and datasets' parquet loader "
                    f"read every file whose name does not start with '.' or '_')", shard=f)
    tok = man.get("tokenizer") or {}
    side = side_columns_from_manifest(man.get("side_columns"))
    source_side, side_source = (), ()
    if source_dir is not None and side:  # compared with the source's values, or a note says which were not
        from packtool.verification.side import source_side_columns
        source_side, side_source = source_side_columns(source_dir, side, log, notes)
    workers = max(1, workers or os.cpu_count() or 1)
    by_name = dict(zip(listed, man["shards"]))
    base = [ShardJob(join(directory, f), f, align, policy, int(tok.get("pad_id") or 0),
                     tok.get("vocab_size"), source_dir, batch_rows, max_problems,
                     checksum=_checksum_of(by_name[f]), side=side, source_side=source_side,
                     side_source=side_source)
            for f in listed if f in present]
    from packtool.progress import bar, large
    pieces = _pieces(base, 4 * workers)
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
                     "missing or unreadable")
    elif (man.get("stats") or {}).get("slabs"):
        log.add("manifest", f"the manifest lists no shards but stats.slabs is {man['stats']['slabs']}",
                expected=man["stats"]["slabs"], found=0)
    return _report(directory, log, notes, results, source_dir, t0)


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
        m.readable &= r.readable
        m.log.merge(r.log)
        for k, v in r.totals.items():
            m.totals[k] = m.totals.get(k, 0) + v
        for d, o in ((m.slabs, r.slabs), (m.segments, r.segments)):
            for k in list(d) or list(o):
                d[k] = np.concatenate([d[k], o[k]]) if k in d else o[k]
    return list(merged.values())


def _check_manifest(man: dict, log: ProblemLog):
    try:
        recorded_tokenize(man)  # verify --source reads it: damage there is found without it too
    except FormatError as e:
        log.add("manifest", str(e))
    try:
        align, packing = manifest_config(man)
        shard_names(man)
    except FormatError as e:
        log.add("manifest", str(e))
        return None, None, None
    return align, packing.overflow, packing.dp


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
        for key, got in (("rows", res.rows), ("tokens", res.totals.get("physical_tokens")),
                         ("loss_tokens", res.totals.get("loss_tokens"))):
            if key in entry and entry[key] != got:
                log.add("shard_counts", f"shard {name} holds {got} {key.replace('_', ' ')}, the manifest "
                        f"says {entry[key]}", shard=name, expected=entry[key], found=got)


def _check_totals(man, align: Alignment, policy: str, dp: int, results, log, source_dir, notes) -> None:
    stats = man.get("stats") or {}
    got = {k: sum(int(r.totals[k]) for r in results) for k in STAT_KEYS}
    slabs = {k: np.concatenate([r.slabs[k] for r in results]) for k in results[0].slabs}
    segs = {k: np.concatenate([r.segments[k] for r in results]) for k in results[0].segments}
    shard_of = np.repeat(np.arange(len(results)), [r.segments["source"].size for r in results])
    got["slabs"] = int(slabs["slab_index"].size)
    got["segments"] = int(segs["source"].size)
    got["lower_bound"] = align.lower_bound(segs["length"])
    got["l2_bound"] = align.l2_bound(segs["length"])
    for k, v in got.items():
        if k in stats and stats[k] != v:
            log.add("manifest_stats", f"the manifest's stats.{k} is {stats[k]}, the shards give {v}",
                    expected=v, found=stats[k])
    names = [r.name for r in results]
    from packtool.verification.cover import check_coverage, check_dp
    n_seq = stats.get("sequences")
    check_coverage(segs, shard_of, names, align, policy, n_seq, stats.get("overflow") or {},
                   int(slabs["singleton"].sum()), source_dir, log, notes)
    check_dp(slabs, dp, log)
    side = side_columns_from_manifest(man.get("side_columns"))
    if side:
        from packtool.verification.side import check_nonfinite
        totals = {}
        for r in results:
            for k, v in r.totals.items():
                totals[k] = totals.get(k, 0) + int(v)
        check_nonfinite(stats, side, totals, policy, log, notes)


def _what_differs(man: dict, tokenize, files: list[str] | None) -> str:
    """`: tokenizer A (pack: B); files ...` for a --source that is not what `pack` read, so
    the thousand token mismatches that follow are explained by their cause in one line."""
    rec = man.get("input") or {}
    said = []
    if tokenize is not None:
        was = rec.get("tokenize") or {}
        for k, v in tokenize.as_dict().items():
            old = was.get(k)
            if k in was and old != v and not (k == "tokenizer" and v and old
                                               and os.path.realpath(v) == os.path.realpath(old)):
                said.append(f"{k} {v} (pack: {old})")
    if files is not None and rec.get("files"):
        packed = [f[0] if isinstance(f, (list, tuple)) else f.get("path") for f in rec["files"]]
        given = [os.path.abspath(f) for f in files]
        if given != packed:
            gone = [p for p in packed if p not in given]
            new = [p for p in given if p not in packed]
            said.append("files " + ("in another order" if not gone and not new else
                                    f"{', '.join(_names(new, gone)[:3]) or 'none'} given, "
                                    f"{', '.join(_names(gone, new)[:3]) or 'none'} packed but not given"))
        elif not said:  # same paths, same options: the fingerprint covers the bytes
            said.append(f"the files {', '.join(_names(given, [])[:3])} are the ones pack read, but their "
                        f"content changed since")
    return f": {'; '.join(said)}" if said else ""


def _names(paths: list[str], others: list[str]) -> list[str]:
    """Each file by its name, or by its whole path where the name alone would also name one of
    `others` (a/x.jsonl given, b/x.jsonl packed: "x.jsonl given, x.jsonl packed" reads as the same)."""
    clash = {os.path.basename(p) for p in others}
    return [p if os.path.basename(p) in clash else os.path.basename(p) for p in paths]


def recorded_tokenize(manifest: dict) -> dict:
    """The tokenization `pack` recorded in the manifest (empty for an older output), checked: a
    record TokenizeConfig refuses is a damaged manifest (FormatError, which verify reports as a
    problem: exit 1), never an error about a flag the user did not give."""
    from dataclasses import fields

    from packtool.errors import PacktoolError, spelled_as
    from packtool.tokenize.config import TokenizeConfig
    rec = (manifest.get("input") or {}).get("tokenize")
    damaged = "the manifest is edited or damaged: re-run `packtool pack`"
    if rec is None:
        return {}
    if not isinstance(rec, dict):
        raise FormatError(f"the manifest's input.tokenize is not an object; {damaged}")
    names = {f.name for f in fields(TokenizeConfig)}
    rec = {k: v for k, v in rec.items() if k in names}
    try:
        with spelled_as({n: n for n in names}):  # the record's keys, not the CLI's flags
            TokenizeConfig(**rec)
    except (PacktoolError, TypeError) as e:
        raise FormatError(f"the manifest's input.tokenize is not a record pack writes ({e}); {damaged}") from None
    return rec


def source_tokenize_for(directory: str, **flags):
    """`source_tokenize_config` of the output at `directory`, or None when its manifest is
    damaged: verify then reports that damage (exit 1, as without a source) and compares no
    tokens. A `directory` that is not there or is a file raises NotAnOutputError."""
    try:
        man = read_manifest(directory)
        recorded_tokenize(man)
    except NotAnOutputError:
        raise
    except FormatError:
        return None
    return source_tokenize_config(man, **flags)


def source_tokenize_config(manifest: dict, **flags):
    """The tokenization `pack` recorded in the manifest, with the flags given winning (None =
    not given). Older manifests without the record fall back to their tokenizer identity."""
    from dataclasses import fields

    from packtool.tokenize.config import TokenizeConfig
    base = dict(recorded_tokenize(manifest))
    if not base:
        info = manifest.get("tokenizer") or {}
        base["tokenizer"] = info.get("path")
        if info.get("chat_template") == "tokenizer_config.json" and info.get("path"):
            base["tokenizer"] = os.path.dirname(info["path"])  # the folder's own template
        else:
            base["chat_template"] = info.get("chat_template")
    base.update({k: v for k, v in flags.items() if v is not None})
    names = {f.name for f in fields(TokenizeConfig)}
    return TokenizeConfig(**{k: v for k, v in base.items() if k in names})


def source_store(inputs: list[str], tokenize, cache_dir: str | None = None,
                 progress: bool = False) -> tuple[str, str]:
    """Re-read and re-tokenize the source exactly as `pack` does, into a fresh temporary
    cache (never the cache being checked: a damaged one would vouch for itself), and return
    the FlatTokens directory the shard workers compare against, plus the input fingerprint.
    The temporary cache lives under the cache root (`cache_dir`, the same file system a
    cache was sized for) and is removed when this process exits."""
    import atexit
    import shutil
    import tempfile

    from packtool.tokenize import default_cache_dir, tokenize_to_cache
    from packtool.tokenize.flat_tokens import flat_store_dir, flat_store_for
    from packtool.output.files import make_parents, remove_created
    from packtool.output.stale import clean_cache
    root = cache_dir or default_cache_dir()
    made = make_parents(root)  # verify leaves no --cache-dir folder it made (its cache is temporary)
    clean_cache(root)  # a killed verify's temporary cache goes with the next one
    fresh = tempfile.mkdtemp(prefix=f".verify-source-{os.getpid()}-", dir=root)

    def gone() -> None:
        shutil.rmtree(fresh, ignore_errors=True)
        remove_created(made)
    atexit.register(gone)
    try:
        cache = tokenize_to_cache(list(inputs), tokenize, cache_dir=fresh, progress=progress)
        flat_store_for(cache)
    except BaseException:
        gone()
        raise
    return flat_store_dir(cache), cache.fingerprint

"""`pack`: raw or tokenized data in, verifiable slabs out (the main job).

tokenize (cached) -> plan (lengths only) -> write shards to a temporary directory ->
manifest last -> swap the directory into place. An interrupted or failed pack never touches
a previous output at the same path.

The plan is made in row shards whose placements spill to disk (packtool.planning.spill; each
writer thread reads only its own shard's segments, slabs/routed.py), so memory does not
grow with the rows; `plan_shard_rows=0` plans globally in memory instead. Rows that fit in
one shard get exactly the global plan, and the same bytes.
"""
from __future__ import annotations

import os
import pickle
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass, replace
from typing import Callable, Iterator

import numpy as np

from packtool.align import Alignment
from packtool.errors import PacktoolCacheError, arg, cli_flag
from packtool.output.folder import (  # noqa: F401
    OutputExistsError,
    Terminated,
    check_output,
    claim_output,
    say,
    spill_dir,
    swap_into_place,
    temp_dir,
)
from packtool.output.store import StoreCommit, check_store, claim_store, commit_to_store, staging_dir
from packtool.output.folder import check_cache_dir
from packtool.output.leftovers import remove_tree  # marker last: a kill mid-removal leaves it provable
from packtool.params import arguments, expect
from packtool.planning.core import PackingConfig, Plan, PlanError, SequenceError, first_too_long
from packtool.planning.bounds import check_capacity
from packtool.planning.core import plan as make_plan
from packtool.planning.sharded import ShardedPlan
from packtool.planning.slabs import SlabSpec
from packtool.planning.spill import PLAN_SHARD_ROWS
from packtool.planning.summary import PlanSummary, plan_summary, with_cache
from packtool.progress import say_if_compiling
from packtool.slabs.format import ShardInfo, build_manifest, write_manifest
from packtool.slabs.writer import release_memory, write_shards
from packtool.storage import is_uri
from packtool.tokenize import TokenizedCache, tokenize_to_cache
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.flat_tokens import flat_store_for
from packtool.tokenize.hf_input import resolve_sources
from packtool.tokenize.request import fingerprint_versions
from packtool.workers import cores


@dataclass(frozen=True)
class PackResult:
    output: str | None  # None for a dry run
    plan: Plan | ShardedPlan  # sharded: per-slab arrays only (its placements are gone)
    summary: PlanSummary
    shards: list[ShardInfo]
    loss_tokens: int
    cache_path: str
    tokenize_seconds: float
    write_seconds: float


def pack(inputs, alignment: Alignment | None = None, packing: PackingConfig | None = None,
         tokenize: TokenizeConfig | None = None, output: str | None = None,
         overwrite: bool = False, dry_run: bool = False, cache_dir: str | None = None,
         progress: bool = False, shard_tokens: int = 64 << 20,
         workers: int | None = None, plan_shard_rows: int | None = None,
         split: str | None = None, config: str | None = None) -> PackResult:
    """Tokenize `inputs` (through the cache) and pack them; see `pack_cache`. `inputs`: paths
    (files, folders, globs), or a `datasets.Dataset`, `IterableDataset` (streamed),
    `DatasetDict` with `split`, `pyarrow.Table` or `pyarrow.dataset.Dataset` (or a list); a
    dataset repo folder or Hub name with `split` (and `config`, its configuration).
    `alignment`, `packing` and `tokenize` default as the CLI's flags do (pre-tokenized rows
    need no tokenizer)."""
    output, overwrite, dry_run, cache_dir, progress, shard_tokens, workers, plan_shard_rows, split, config = \
        arguments(output=output, overwrite=overwrite, dry_run=dry_run, cache_dir=cache_dir, progress=progress,
                  shard_tokens=shard_tokens, workers=workers, plan_shard_rows=plan_shard_rows, split=split,
                  config=config)
    alignment = Alignment() if alignment is None else alignment
    tokenize = expect(tokenize, TokenizeConfig, "pack", "tokenize", optional=True) or TokenizeConfig()
    _expect_plan_args("pack", alignment, packing)
    items = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    paths = [i for i in items if isinstance(i, (str, os.PathLike))]  # objects hold no path
    check_capacity(alignment, sharded=plan_shard_rows != 0,  # before tokenizing: the table sizes
                   writers=0 if dry_run else (workers or cores()))
    cache_dir = check_cache_dir(cache_dir, paths)
    with claim(output, overwrite, dry_run, inputs=[*paths, *_config_files(tokenize)],
               cache_dir=cache_root(cache_dir), cache_uri=cache_dir if cache_dir and is_uri(cache_dir) else None) as out:
        say_if_compiling(progress and not dry_run)
        t0 = time.perf_counter()
        # a reused entry comes back naming this run's tokenizer and options (request.CacheRequest)
        cache = tokenize_to_cache(resolve_sources(inputs, split, config), tokenize, cache_dir=cache_dir,
                                  progress=progress, check_lengths=first_too_long(alignment, packing))
        res = pack_cache(cache, alignment, packing, out, overwrite=overwrite, dry_run=dry_run,
                         progress=progress, shard_tokens=shard_tokens,
                         tokenize_seconds=time.perf_counter() - t0, workers=workers,
                         plan_shard_rows=plan_shard_rows)
    return as_given(res, output)


def as_given(res: PackResult, output: str | None) -> PackResult:
    """The result names the output as the caller gave it (the work used its resolved path)."""
    return replace(res, output=output) if res.output is not None else res


@contextmanager
def claim(output: str | None, overwrite: bool = False, dry_run: bool = False, inputs=(),
          cache_dir: str | None = None, cache_root: str | None = None,
          cache_uri: str | None = None) -> Iterator[str | None]:
    """The output's claim: `output.folder.claim_output` for a folder, `output.store.claim_store`
    (lease + commit protocol) for an object-store URI. Yields the output the work must use:
    a folder's resolved path (None for a dry run), a URI as given. `cache_uri`: a cache on
    the store (`cache_dir` is then its local mirror)."""
    if output and is_uri(output):
        if not dry_run:
            with _claim_store(output, overwrite, [os.fspath(i) for i in inputs], cache_uri or cache_dir):
                yield output
            return
        check_store(output, overwrite, [os.fspath(i) for i in inputs], cache_uri or cache_dir)
        output = None  # checked as the real run's would be; a dry run claims nothing there
    with claim_output(output, overwrite, dry_run, inputs=inputs, cache_dir=cache_dir,
                      cache_root=cache_root) as out:
        yield out


@contextmanager
def _claim_store(output: str, overwrite: bool, inputs: list[str], cache_dir: str | None):
    # claim_output's dry-run claim is its SIGTERM handling alone: a terminated run unwinds
    # like Ctrl-C, so the lease is released and the staging folder removed
    with claim_output(None, dry_run=True):
        try:
            with claim_store(output, overwrite, inputs=inputs, cache_dir=cache_dir):
                yield
        except Terminated:
            say(f"terminated (SIGTERM): this run's temporary files and uploads are removed; {output} "
                f"holds a whole output (the previous one unless the new manifest was already put)")
            raise


def _expect_plan_args(func: str, alignment, packing) -> None:
    expect(alignment, Alignment, func, "alignment")
    expect(packing, PackingConfig, func, "packing", optional=True)


def cache_root(cache_dir: str | None) -> str:
    """The local cache folder: `cache_dir`, the default, or for a store URI its local mirror."""
    from packtool.tokenize.request import default_cache_dir
    if cache_dir and is_uri(cache_dir):
        from packtool.tokenize.store_cache import mirror_dir
        return mirror_dir(cache_dir, default_cache_dir())
    return cache_dir or default_cache_dir()


def _config_files(tokenize: TokenizeConfig) -> list[str]:
    """The tokenizer and template files: inputs too, which an --output must not hold."""
    return [p for p in (tokenize.tokenizer, tokenize.chat_template)
            if isinstance(p, str) and os.path.exists(p)]


def pack_cache(cache: TokenizedCache, alignment: Alignment, packing: PackingConfig | None = None,
               output: str | None = None, overwrite: bool = False, dry_run: bool = False,
               progress: bool = False, shard_tokens: int = 64 << 20,
               tokenize_seconds: float = 0.0, workers: int | None = None,
               plan_shard_rows: int | None = None) -> PackResult:
    """Plan a tokenized cache's rows and write the slabs + manifest to `output`; shards are
    written by up to `workers` threads of this process (default: one per core; the bytes do
    not depend on it). The plan is made in shards of `plan_shard_rows` rows (default
    `PLAN_SHARD_ROWS`) spilled to disk; 0 plans every row at once in memory."""
    expect(cache, TokenizedCache, "pack_cache", "cache")
    output, overwrite, dry_run, progress, shard_tokens, workers, plan_shard_rows = arguments(
        output=output, overwrite=overwrite, dry_run=dry_run, progress=progress, shard_tokens=shard_tokens,
        workers=workers, plan_shard_rows=plan_shard_rows)
    _expect_plan_args("pack_cache", alignment, packing)
    packing = packing or PackingConfig()
    with claim(output, overwrite, dry_run, cache_root=os.path.dirname(cache.path)) as out:
        return as_given(_pack_cache(cache, alignment, packing, out, dry_run, progress, shard_tokens,
                                    tokenize_seconds, workers, plan_shard_rows), output)


def _pack_cache(cache: TokenizedCache, alignment: Alignment, packing: PackingConfig,
                output: str | None, dry_run: bool, progress: bool, shard_tokens: int,
                tokenize_seconds: float, workers: int | None,
                plan_shard_rows: int | None) -> PackResult:
    shard_rows = PLAN_SHARD_ROWS if plan_shard_rows is None else plan_shard_rows  # checked by pack_cache
    if shard_rows and cache.num_rows:
        return _pack_spilled(cache, alignment, packing, output, dry_run, progress, shard_tokens,
                             tokenize_seconds, workers, shard_rows)
    lengths = cache.lengths()
    with rows_named(cache):
        p = make_plan(lengths, alignment, packing)
    summary = with_cache(plan_summary(p), cache)
    if dry_run:
        return PackResult(None, p, summary, [], 0, cache.path, tokenize_seconds, 0.0)
    release_memory()  # the planner's freed temporaries, before the write needs its own
    t1 = time.perf_counter()
    tokens = flat_store_for(cache)
    if not np.array_equal(np.diff(tokens.offsets), lengths):
        raise PacktoolCacheError("tokenized cache is inconsistent; delete it and re-run", path=cache.path)
    shards, loss = write_output(p, summary, cache, output, lambda tmp, pad_id: write_shards(
        p, tokens, tmp, pad_id, shard_tokens=shard_tokens, on_rows=_progress_cb(progress, p.num_slabs),
        workers=workers))
    return PackResult(output, p, summary, shards, loss, cache.path, tokenize_seconds,
                      time.perf_counter() - t1)


def _pack_spilled(cache: TokenizedCache, alignment: Alignment, packing: PackingConfig,
                  output: str | None, dry_run: bool, progress: bool, shard_tokens: int,
                  tokenize_seconds: float, workers: int | None, shard_rows: int) -> PackResult:
    """`pack_cache` with the plan in row shards spilled beside the output (or to the system's
    temporary directory for a dry run); the spill goes whatever happens. While the shards
    are written, the plan's per-slab arrays wait on disk too."""
    from packtool.planning.spill import plan_spilled
    from packtool.slabs.routed import SpilledShards, write_spilled

    store_dir = flat_store_for(cache).directory  # built (or rebuilt from an older layout) once
    release_memory()
    spill = staging_dir(output, "spill") if output and is_uri(output) else spill_dir(output)
    try:
        with rows_named(cache):
            sp = plan_spilled(cache, alignment, packing, shard_rows, store_dir, spill)
        summary = with_cache(sp.summary(), cache)
        if dry_run:
            return PackResult(None, replace(sp, handles=[]), summary, [], 0, cache.path,
                              tokenize_seconds, 0.0)
        t1 = time.perf_counter()
        shards_in = SpilledShards.route(sp, store_dir, spill, shard_tokens)
        stash, n_slabs, config = os.path.join(spill, "plan.pkl"), sp.num_slabs, sp.spec(0, 0)
        with open(stash, "wb") as f:
            pickle.dump(replace(sp, handles=[]), f, protocol=pickle.HIGHEST_PROTOCOL)
        del sp
        release_memory()  # the plan and the routing's temporaries, before the writers start
        shards, loss = write_output(config, summary, cache, output, lambda tmp, pad_id: write_spilled(
            shards_in, store_dir, tmp, pad_id, on_rows=_progress_cb(progress, n_slabs), workers=workers,
            side=cache.side_columns))
        with open(stash, "rb") as f:
            sp = pickle.load(f)
    finally:
        remove_tree(spill)
    return PackResult(output, sp, summary, shards, loss, cache.path, tokenize_seconds,
                      time.perf_counter() - t1)


@contextmanager
def rows_named(cache: TokenizedCache):
    """A planner's error about "sequence N" (a row of the cache, numbered across every input)
    named as the input file and its row instead."""
    try:
        yield
    except SequenceError as e:
        path, row = source_of_row(cache, e.sequence)
        raise PlanError(e.detail, path=path, row=row) from None


def source_of_row(cache: TokenizedCache, i: int) -> tuple[str | None, int]:
    """(input file, row in it; 0-based like the tokenizer's errors) of cache row `i`, through
    the cache's `source_index` (global input row, skipped rows counted) and the rows each
    input held (cache.json `inputs`). A cache without per-input counts: (None, global row)."""
    from packtool.tokenize.source_rows import SourceRows
    return SourceRows(cache).locate(i)


def write_output(p: Plan | ShardedPlan | SlabSpec, summary: PlanSummary, cache: TokenizedCache,
                 output: str, write_fn: Callable[[str, int], list[ShardInfo]],
                 uploads: bool = False) -> tuple[list[ShardInfo], int]:
    """Every engine's ending: `write_fn(tmp_dir, pad_id)` writes the shards into a temporary
    directory, then the manifest goes last and the directory is swapped into place. On any
    failure (Ctrl-C included) the temporary directory goes and `output` is untouched. Of `p`
    the manifest reads the alignment and packing config only. `uploads`: on an object-store
    output, `write_fn` gets an `output.store.StoreCommit` instead of a folder and puts the
    shards itself (the Ray engine's workers), under the names its `begin` gives."""
    info = _plain(cache.tokenizer_info) or {}
    store = is_uri(output)
    if store and uploads:
        commit = StoreCommit(output)
        try:
            shards = write_fn(commit, _pad_id(info))
            loss, manifest = _manifest_of(p, summary, cache, output, shards, info)
            return commit.finish(shards, manifest), loss
        except BaseException:
            commit.abort()
            raise
    tmp = staging_dir(output, "tmp") if store else temp_dir(output)
    try:
        shards = write_fn(tmp, _pad_id(info))
        loss, manifest = _manifest_of(p, summary, cache, output, shards, info)
        if store:  # no rename on a store: the manifest, put last, is the commit
            shards = commit_to_store(tmp, output, shards, manifest)
            remove_tree(tmp)
        else:
            write_manifest(tmp, manifest)
            swap_into_place(tmp, output)
    except BaseException:
        remove_tree(tmp)
        raise
    return shards, loss


def _manifest_of(p, summary: PlanSummary, cache: TokenizedCache, output: str, shards: list[ShardInfo],
                 info: dict) -> tuple[int, dict]:
    loss = sum(s.loss_tokens for s in shards)
    if loss == 0:  # nothing to train on is never what was asked for
        from packtool.errors import PacktoolInputError
        ovf = summary.overflow
        hint = (f"{arg('overflow', 'split')} cut {ovf.sequences:,} sequence(s) into chunks of at most "
                f"{summary.alignment['usable']} token(s), which keep no targets: raise "
                f"{arg('capacity')}" if ovf.policy == "split" and ovf.sequences
                else "check the loss masks and the chat template")
        raise PacktoolInputError(f"the packed output would hold 0 loss tokens: {hint}", path=output,
                                 flag=cli_flag("capacity") if ovf.policy == "split" and ovf.sequences else None)
    cfg = cache.meta.get("config") or {}
    inp = {"fingerprint": cache.fingerprint,
           "files": [_plain(f) for f in cache.input_files],
           "tokenize": cfg,  # lets `verify --source` re-tokenize alike
           # the fingerprint's versions: a later packtool or tokenizers is not an edited manifest
           "versions": fingerprint_versions(bool(cfg.get("side_columns") or cfg.get("support_columns")))}
    return loss, build_manifest(p, shards, manifest_stats(summary, loss, getattr(cache, "side_columns", ())), info, inp,
                                side=getattr(cache, "side_columns", ()))


def _plain(x):
    if is_dataclass(x):
        return asdict(x)
    if isinstance(x, (tuple, list)):
        return list(x)
    return x


def _pad_id(info: dict) -> int:
    for k in ("pad_id", "eos_id"):
        if info.get(k) is not None:
            return int(info[k])
    return 0


def manifest_stats(s: PlanSummary, loss_tokens: int, side=()) -> dict:
    """The manifest's `stats` block."""
    pad = s.padding
    return {"sequences": s.sequences, "segments": s.segments, "slabs": s.slabs,
            "real_tokens": pad.real_tokens, "loss_tokens": loss_tokens,
            "physical_tokens": pad.physical_tokens, "layout_pad": pad.layout_pad,
            "tail_pad": pad.tail_pad, "fill_pad": pad.fill_pad, "slack": pad.slack,
            "lower_bound": s.lower_bound, "l2_bound": s.l2_bound,
            "dp_imbalance": s.dp_imbalance, "dp_moved": s.dp_moved,
            "overflow": asdict(s.overflow), "skipped_rows": dict(s.skipped_rows),
            "changes": asdict(s.changes), **side_nonfinite_stats(s, side)}


def side_nonfinite_stats(s: PlanSummary, side=()) -> dict:
    """`stats.side_nan` / `stats.side_inf`: per float side column, the NaN / +-inf values the
    input held (`verify` counts them in the slabs again; FORMAT.md, Side columns); {} when
    there is none."""
    names = [c.name for c in side if not c.is_int]
    got = s.side_nonfinite
    return {f"side_{k}": {n: int((got.get(n) or {}).get(k, 0)) for n in names} for k in ("nan", "inf")}


def _progress_cb(progress: bool, total: int):
    if not progress:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    bar = Progress(TextColumn("Writing "), BarColumn(), MofNCompleteColumn(), TextColumn("slabs"),
                   transient=False, console=Console(stderr=True))  # stdout: tables and --json
    task = bar.add_task("write", total=total)
    from packtool.threads import starting
    with starting():  # its refresh thread
        bar.start()
    done = [0]

    def cb(n: int) -> None:
        done[0] += n
        bar.update(task, advance=n)
        if done[0] >= total:
            bar.stop()
    return cb


# OutputExistsError and check_output: older callers imported them from here.
__all__ = ["OutputExistsError", "PackResult", "cache_root", "check_output", "manifest_stats", "pack",
           "pack_cache", "rows_named", "source_of_row", "write_output"]

"""The Ray engine on object storage (`--cache-dir s3://...`, `-o s3://...`, s3 inputs), with
no file system shared between nodes.

  cache   an entry of the store cache (packtool.tokenize.store_cache: `ROOT/<key>/`, cache.json
          put last). Built by the tasks that tokenize: each writes its parts on its own node's
          scratch, hashes them, uploads them under the entry and reports their records; the
          driver puts cache.json (the commit) once all are up, under a push marker (each part's
          proof put before it: tokenize.store_push, so what a kill leaves is removed later).
          Read by the plan and write tasks straight from the store (ranged GETs of Parquet row
          groups). An entry found committed
          is re-hashed by Ray tasks against cache.json before it is used (as a local cache is);
          a damaged one is uncommitted (its cache.json deleted) and rebuilt.
  output  the commit protocol of packtool.output.store: the driver holds the lease, names the
          shards and puts the intent (StoreCommit.begin), the write tasks upload each shard
          from their own node's scratch, the driver puts the manifest last (StoreCommit.finish).
  spill   the segments move between tasks through Ray's object store (its own spilling stays
          under each node's Ray temp folder, read back by that node's raylet only).
"""
from __future__ import annotations

from packtool.engines.ray_env import remote
from packtool.notes import note
from packtool.storage import shown
from packtool.tokenize.cache import TokenizedCache, cache_problem
from packtool.tokenize.cache_entry import file_problem
from packtool.tokenize.chat_keys import say_stored
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.request import resolve_cache
from packtool.tokenize.store_cache import ENTRY_META, refuse_foreign_objects
from packtool.tokenize.store_push import Push, cache_place, sweep_pushes

CHECK_TASKS_PER_CPU = 2  # the re-hash of a reused entry, spread over the cluster


def _check_files(root: str, records: list) -> str | None:
    for name, rec in records:
        problem = file_problem(root, name, rec)
        if problem:
            return problem
    return None


def check_on_ray(root: str, records: list) -> str | None:
    """`cache_problem`'s file check as Ray tasks (each streams its objects once): the first
    problem found, in record order."""
    import ray
    if not records:
        return None
    n = max(1, min(len(records), int(ray.cluster_resources().get("CPU", 1)) * CHECK_TASKS_PER_CPU))
    step = -(-len(records) // n)  # contiguous runs: the first problem is the first in order
    f = remote(_check_files)
    refs = [f.remote(root, records[k:k + step]) for k in range(0, len(records), step)]
    return next((p for p in ray.get(refs) if p), None)

def store_tokenized_cache(inputs: list[str], cfg: TokenizeConfig, cache_dir: str,
                          progress: bool = False, check_lengths=None) -> TokenizedCache:
    """The store entry for these inputs and options (committed and re-hashed, or built on Ray)."""
    from packtool.engines.ray_cache import InputHashes, build_cache
    from packtool.engines.ray_source import TokenizeJob

    hashes = InputHashes()  # the inputs are read by tasks, never by the driver
    sweep_pushes(cache_dir)  # what killed pushes left there (store_push)
    r = resolve_cache(inputs, cfg, cache_dir, digest=hashes)  # r.final: the entry's URI; nothing is local
    damaged = False
    if cache_place(r.final).join(ENTRY_META).is_file():
        problem = cache_problem(r.final, r.fingerprint, check=check_on_ray)
        if problem is None:
            cache = r.this_run(TokenizedCache(r.final, reused=True))
            say_stored(cache.meta, r.template)  # its notes, as when it was built
            return cache
        refuse_foreign_objects(r.final, problem)  # one holding a user's object is left, as locally
        note(f"tokenized cache {shown(r.final)} is damaged ({problem}); rebuilding it from the inputs")
        damaged = True
    if cfg.side_columns or cfg.support_columns:
        # pre-tokenized rows with side columns: the driver's columnar copy (no tokenizer), built
        # in its own mirror and pushed (replacing a damaged entry); the tasks read the entry from the store
        from packtool.tokenize.pipeline import tokenize_to_cache
        if damaged:
            cache_place(r.final).join(ENTRY_META).delete()  # uncommitted: pushed again in full
        tokenize_to_cache(inputs, cfg, cache_dir, progress, check_lengths)
        return TokenizedCache(r.final)
    job = TokenizeJob(tuple(r.files), tuple(r.shapes), r.cfg, r.info, r.template, check_lengths)
    with Push(cache_dir, r.fingerprint[:32]) as push:  # the tasks put each part's proof first
        if damaged:
            cache_place(r.final).join(ENTRY_META).delete()  # uncommitted: no one uses it while it is rebuilt
        return build_cache(job, r.fingerprint, r.final, None, progress, hashes.sha256, push=push.run,
                           hashed=hashes.read)


__all__ = ["check_on_ray", "store_tokenized_cache"]

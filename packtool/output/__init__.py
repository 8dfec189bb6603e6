"""packtool.output: the one owner of every path packtool writes.

Base half (any stage may import it; nothing here reads the slab format), imported through
files.py, each rule owned by one module:
  paths.resolve / resolve_folder  the one absolute path a run acts on (`~`, `./x/./`, links)
  paths.check_new_file            refuse a link, a folder, an input, an existing file (unless
                                  the caller's replace flag), a missing or read-only folder
  writes.write_file               a context manager: exclusive temporary beside the target,
                                  published by one link (no replace) or rename (replace)
  writes.open_append              a log appended to, never through a link or into a FIFO
  lock.open_lock                  the lock file: O_CREAT|O_EXCL|O_NOFOLLOW, an existing one
                                  reopened only when it is packtool's (never truncated else)
  writes.make_parents / remove_created   parents a failed run created go with it
  relations.check_relations       where an --output may not lie (cwd, inputs, cache)
  unchanged.check_unchanged       an output replaced while verify or inspect read it
Stage half (after slabs/: reads the manifest), for the `pack` output folder:
  folder.check_cache_dir                where the tokenized cache root may not lie (a file, a
                                        packed output, an input folder), for every entry: owned
                                        by tokenize.cache_root (tokenize_to_cache runs it too)
  folder.claim_output / check_output / temp_dir / spill_dir / swap_into_place
  owned.owned_names / remove_previous   what in an existing output is packtool's
  stale.clean_stale                     what dead runs left, removed by the next run
  store.claim_store / commit_to_store   the same for an object-store prefix: lease, intent,
                                        shards, manifest last (FORMAT.md, "Object storage")
docs/DESIGN.md ("Who writes where") is the prose.
"""
from packtool.output.files import check_new_file, open_append, resolve, resolve_folder, write_file

__all__ = ["check_new_file", "open_append", "resolve", "resolve_folder", "write_file"]

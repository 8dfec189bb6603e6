"""Every path flag and argument of every command, as an object-store URI: checked once, before
the command's work, in one line naming the flag (cli.failure.guarded calls it first).

A place that may lie on a store (`STORE_PARAMS`) is held to storage.check_uri: a known scheme,
no credentials, a bucket named and existing, and for a place written (`WRITTEN`) a probe put:
a cache on a missing bucket was found only once every input was tokenized, `s3://` was said
in pyarrow's words. Every other path parameter (flags.PATH_PARAMS) names a local file or folder
(`output.paths.refuse_uri`): a URI there would be read as "no such file" or written to a local
folder named `s3:`. Library calls meet the same rules where the argument is used (locate,
check_cache_dir, the lease of an --output on a store); this names the flag before any of it.
"""
from __future__ import annotations

from packtool.cli.flags import PATH_PARAMS

# (command, parameter) that may name an object store; every other path parameter is local
STORE_PARAMS = {"pack": {"inputs", "output", "cache_dir"}, "verify": {"directory", "source", "cache_dir"},
                "inspect": {"directory"}, "train": {"data_dir"}}
# of those, what packtool writes into and probes with a put: checked here by its text alone, its
# bucket and the put by check_cache_dir (library and CLI alike, after the local root it mirrors
# into). An --output's probe is its lease, taken before any work: a put beside another writer's
# listing would be a foreign object there.
WRITTEN = {"cache_dir"}
# the local-only parameters packtool writes (the others it reads)
LOCAL_WRITES = {"plan": {"output"}, "inspect": {"html"}, "train": {"save", "json_log"}}
# the library argument each parameter is spelled as (errors.arg gives its flag)
PARAM_ARG = {"plan_file": "plan", "directory": "DIR", "data_dir": "DATA_DIR"}


def _values(v) -> list[str]:
    return [x for x in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(x, str)]


def check_store_flags(command: str | None, args: dict) -> None:
    """Refuse, before any work, a URI in `command`'s path parameters (`args`, by name) that
    packtool cannot use there."""
    from packtool.output.paths import refuse_uri
    from packtool.storage import check_form, check_uri, is_uri
    store = STORE_PARAMS.get(command or "", set())
    for name in sorted(PATH_PARAMS.get(command or "", ())):
        said = PARAM_ARG.get(name, name)
        for spec in _values(args.get(name)):
            if not is_uri(spec):
                continue
            if name in WRITTEN:  # its one full check is the library's, after the local root's (check_cache_dir)
                check_form(spec, said)
            elif name in store:
                check_uri(spec, said)
            else:
                refuse_uri(spec, said, reads=name not in LOCAL_WRITES.get(command, ()))
    if command == "pack":  # --split / --config with a URI: before it is asked of or taken for a Hub name, after
        # its store is checked (RB-13: a store that does not answer is its own line, with --split or not)
        from packtool.tokenize.store_split import refuse_store_split
        refuse_store_split(_values(args.get("inputs")), args.get("split"), args.get("config"))


__all__ = ["LOCAL_WRITES", "PARAM_ARG", "STORE_PARAMS", "WRITTEN", "check_store_flags"]

"""`verify`'s `manifest_declared`: the cross-field rules of a manifest (their owner is
slabs/declared.py, which every reader asks as it opens an output) and, with `--source`,
`stats.skipped_rows` against the rows the source's tokenizing skipped."""
from __future__ import annotations

from packtool.slabs.declared import declared_breaks
from packtool.verification.problems import ProblemLog

CHECK = "manifest_declared"


def check_declared(man: dict, policy: str, log: ProblemLog) -> None:
    for what, expected, found in declared_breaks(man, policy):
        log.add(CHECK, f"{what}: the manifest was edited", expected=expected, found=found)


def check_skipped_with_source(man: dict, source_dir: str, log: ProblemLog, notes: list[str]) -> None:
    """`stats.skipped_rows` against the rows the tokenized source skipped (its cache.json),
    when that source was tokenized with the manifest's on_empty."""
    from packtool.errors import PacktoolError
    from packtool.tokenize.flat_tokens import cache_of_store
    try:
        cache = cache_of_store(source_dir)
    except PacktoolError:
        cache = None
    if cache is None:
        return
    tok = (man.get("input") or {}).get("tokenize") or {}
    if (cache.meta.get("config") or {}).get("on_empty") != tok.get("on_empty"):
        notes.append("the source was tokenized with another on_empty than the pack's: stats.skipped_rows "
                     "was not compared with it")
        return
    said = (man.get("stats") or {}).get("skipped_rows")
    if not isinstance(said, dict):
        return
    for k in ("empty", "all_masked"):
        got = int((getattr(cache, "skipped", None) or {}).get(k, 0))
        if k in said and said[k] != got:
            log.add(CHECK, f"stats.skipped_rows.{k} is {said[k]}, the source skips {got} such row(s) "
                    f"(re-tokenized with the pack's options): the manifest was edited",
                    expected=got, found=said[k])

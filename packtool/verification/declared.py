"""`verify`: the manifest fields that record a policy or a declaration another field repeats
must agree with it. An edit that keeps every shard valid can otherwise switch a check off
(a support column declared `values`, a side column dropped with its declaration) or claim or
hide a data change (`stats.changes` the recorded policies make impossible):

- `side_columns` against `input.tokenize.side_columns` / `support_columns` (names, kind, a
  `NAME:DTYPE` pin's dtype);
- `stats.overflow.policy` against `config.packing.overflow`, and the overflow figures against
  what that policy can produce (planning.core.OVERFLOW_FIGURES, apply_overflow's own);
- `stats.skipped_rows` against `input.tokenize.on_empty` (only `skip` skips a row);
- `stats.changes` against `stats.overflow` + `stats.skipped_rows`, derived by their one owner
  (planning.summary.data_changes);
- with `--source`, `stats.skipped_rows` against the rows the source's tokenizing skipped.
"""
from __future__ import annotations

from dataclasses import asdict, fields

from packtool.planning.core import OverflowStats, overflow_off_policy
from packtool.planning.summary import data_changes
from packtool.errors import PacktoolInputError, spelled_as
from packtool.side import parse_side_spec, side_columns_from_manifest
from packtool.verification.problems import ProblemLog

_FIGURES = tuple(f.name for f in fields(OverflowStats) if f.name != "policy")
CHECK = "manifest_declared"


def check_declared(man: dict, policy: str, log: ProblemLog) -> None:
    """Every cross-field rule above that the manifest's form allows checking (an older output
    without `input.tokenize` or `stats.changes` skips the rules that need them)."""
    tok = (man.get("input") or {}).get("tokenize")
    stats = man.get("stats") or {}
    if isinstance(tok, dict):
        _side_against_tokenize(man, tok, log)
    _overflow_against_policy(stats, policy, log)
    if isinstance(tok, dict):
        _skipped_against_on_empty(stats, tok.get("on_empty"), log)
    _changes_against_figures(stats, policy, log)


def _bad(log: ProblemLog, message: str, expected=None, found=None) -> None:
    log.add(CHECK, f"{message}: the manifest was edited", expected=expected, found=found)


def _side_against_tokenize(man: dict, tok: dict, log: ProblemLog) -> None:
    # input.tokenize records the options as given (`NAME:DTYPE` pins included): read by their
    # one owner, never compared as plain names
    try:
        with spelled_as({k: f"input.tokenize.{k}" for k in ("side_columns", "support_columns")}):
            spec = parse_side_spec(_listed(tok, "side_columns"), _listed(tok, "support_columns"))
    except PacktoolInputError as e:
        _bad(log, str(e).split(" (see --")[0])
        return
    named = {name: (pinned, kind) for name, pinned, kind in spec}
    side = side_columns_from_manifest(man.get("side_columns"))
    have = {c.name: c for c in side}
    for name in named:
        if name not in have:
            _bad(log, f"input.tokenize names side column {name!r} but side_columns does not declare it",
                 expected=name, found=None)
    for c in side:
        if c.name not in named:
            _bad(log, f"side_columns declares {c.name!r}, which input.tokenize.side_columns/support_columns "
                 f"do not name", expected=None, found=c.name)
            continue
        pinned, want = named[c.name]
        got = "support" if c.is_support else "values"
        if want != got:
            _bad(log, f"side_columns declares {c.name!r} kind {got!r}, but input.tokenize."
                 f"{'support' if want == 'support' else 'side'}_columns names it (kind {want!r})",
                 expected=want, found=got)
        if pinned is not None and pinned != c.dtype:
            _bad(log, f"side_columns declares {c.name!r} as {c.dtype}, but input.tokenize.side_columns pins "
                 f"{c.name}:{pinned}", expected=pinned, found=c.dtype)


def _listed(tok: dict, key: str) -> list:
    value = tok.get(key)
    if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise PacktoolInputError(f"input.tokenize.{key} is {value!r}, not a list of names")
    return value or []


def _overflow_against_policy(stats: dict, policy: str, log: ProblemLog) -> None:
    over = stats.get("overflow")
    if not isinstance(over, dict):
        return
    # a policy manifest_config read, so one of OVERFLOW_POLICIES; the rule is planning's
    for k, want, got in overflow_off_policy(over, policy):
        if k == "policy":
            _bad(log, f"stats.overflow.policy is {got!r}, config.packing.overflow is {policy!r}",
                 expected=want, found=got)
        else:
            _bad(log, f"stats.overflow.{k} is {got}, impossible under overflow policy {policy!r}",
                 expected=want, found=got)


def _skipped_against_on_empty(stats: dict, on_empty, log: ProblemLog) -> None:
    skipped = stats.get("skipped_rows")
    if not isinstance(skipped, dict) or on_empty == "skip":
        return
    for k, v in skipped.items():
        if v:
            _bad(log, f"stats.skipped_rows.{k} is {v}, but input.tokenize.on_empty is {on_empty!r} "
                 f"(only 'skip' skips a row)", expected=0, found=v)


def _changes_against_figures(stats: dict, policy: str, log: ProblemLog) -> None:
    changes, over = stats.get("changes"), stats.get("overflow")
    if not isinstance(changes, dict) or not isinstance(over, dict):
        return
    try:
        figures = OverflowStats(policy, **{k: int(over.get(k) or 0) for k in _FIGURES})
        want = asdict(data_changes(figures, stats.get("skipped_rows") or {}))
    except (TypeError, ValueError):  # not numbers: the manifest's form checks name them
        return
    for k, v in want.items():
        if k in changes and changes[k] != v:
            _bad(log, f"stats.changes.{k} is {changes[k]}, but stats.overflow and stats.skipped_rows "
                 f"under overflow policy {policy!r} give {v}", expected=v, found=changes[k])


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

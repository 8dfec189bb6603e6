"""The manifest fields that record a policy or a declaration another field repeats
must agree with it. An edit that keeps every shard valid can otherwise switch a check off
(a support column declared `values`, a side column dropped with its declaration) or claim or
hide a data change (`stats.changes` the recorded policies make impossible):

- `side_columns` against `input.tokenize.side_columns` / `support_columns` (names, kind, a
  `NAME:DTYPE` pin's dtype);
- `stats.overflow.policy` against `config.packing.overflow`, and the overflow figures against
  what that policy can produce (planning.core.OVERFLOW_FIGURES, apply_overflow's own);
- `stats.skipped_rows` against `input.tokenize.on_empty` (only `skip` skips a row);
- `stats.changes` against `stats.overflow` + `stats.skipped_rows` (+ its own `sequences_one_token`
  in `sequences_untrained`), derived by their one owner (planning.summary.data_changes);

Asked by `verify` (one problem each, check `manifest_declared`) and by every reader as it opens an
output (slabs.format.SlabManifest.read, the first in one line): no consumer trains on a manifest
verify rejects for these.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, fields

from packtool.planning.core import OverflowStats, overflow_off_policy
from packtool.planning.summary import data_changes
from packtool.errors import PacktoolInputError, spelled_as
from packtool.side import parse_side_spec, side_columns_from_manifest

_FIGURES = tuple(f.name for f in fields(OverflowStats) if f.name != "policy")


def declared_breaks(man: dict, policy: str) -> Iterator[tuple[str, object, object]]:
    """(what, expected, found) for every cross-field rule above the manifest breaks, of those its
    form allows checking (an older output without `input.tokenize` or `stats.changes` skips the
    rules that need them)."""
    tok = (man.get("input") or {}).get("tokenize")
    stats = man.get("stats") or {}
    if isinstance(tok, dict):
        yield from _side_against_tokenize(man, tok)
    yield from _overflow_against_policy(stats, policy)
    if isinstance(tok, dict):
        yield from _skipped_against_on_empty(stats, tok.get("on_empty"))
    yield from _changes_against_figures(stats, policy)
    yield from _some_slab(man.get("shards"))


def _some_slab(shards) -> Iterator[tuple[str, object, object]]:
    """An output whose listed shards all hold 0 rows, or that lists no shard at all (a merge or
    re-sharding tool's empty output, the 0-row files dropped or kept: pack refuses to write one),
    holds nothing to train: one verdict for verify and every reader (S49B-4, S50B-1: verify passed
    it, SlabDataset read 0 slabs, to_hf blamed another run or the caller's cache_dir, train refused).
    The only owner of the rule: every reader asks it as it opens an output."""
    if not isinstance(shards, list) or not all(isinstance(e, dict) for e in shards):
        return  # a manifest of another form: its own problems say so
    if not shards:
        yield _b("the manifest lists no shard: the output holds no slab, which pack never writes",
                 expected="at least one slab", found=0)
        return
    rows = [e.get("rows") for e in shards]
    if all(isinstance(n, int) and not isinstance(n, bool) for n in rows) and sum(rows) == 0:
        yield _b(f"every listed shard holds 0 rows ({len(shards)} shard(s)): the output holds no slab, which "
                 f"pack never writes", expected="at least one slab", found=0)


def _side_against_tokenize(man: dict, tok: dict):
    # input.tokenize records the options as given (`NAME:DTYPE` pins included): read by their
    # one owner, never compared as plain names
    try:
        with spelled_as({k: f"input.tokenize.{k}" for k in ("side_columns", "support_columns")}):
            spec = parse_side_spec(_listed(tok, "side_columns"), _listed(tok, "support_columns"))
    except PacktoolInputError as e:
        yield _b(str(e).split(" (see --")[0])
        return
    named = {name: (pinned, kind) for name, pinned, kind in spec}
    side = side_columns_from_manifest(man.get("side_columns"))
    have = {c.name: c for c in side}
    for name in named:
        if name not in have:
            yield _b(f"input.tokenize names side column {name!r} but side_columns does not declare it",
                     expected=name, found=None)
    for c in side:
        if c.name not in named:
            yield _b(f"side_columns declares {c.name!r}, which input.tokenize.side_columns/support_columns "
                     f"do not name", expected=None, found=c.name)
            continue
        pinned, want = named[c.name]
        got = "support" if c.is_support else "values"
        if want != got:
            yield _b(f"side_columns declares {c.name!r} kind {got!r}, but input.tokenize."
                     f"{'support' if want == 'support' else 'side'}_columns names it (kind {want!r})",
                     expected=want, found=got)
        if pinned is not None and pinned != c.dtype:
            yield _b(f"side_columns declares {c.name!r} as {c.dtype}, but input.tokenize.side_columns pins "
                     f"{c.name}:{pinned}", expected=pinned, found=c.dtype)


def _listed(tok: dict, key: str) -> list:
    value = tok.get(key)
    if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise PacktoolInputError(f"input.tokenize.{key} is {value!r}, not a list of names")
    return value or []


def _overflow_against_policy(stats: dict, policy: str):
    over = stats.get("overflow")
    if not isinstance(over, dict):
        return
    # a policy manifest_config read, so one of OVERFLOW_POLICIES; the rule is planning's
    for k, want, got in overflow_off_policy(over, policy):
        if k == "policy":
            yield _b(f"stats.overflow.policy is {got!r}, config.packing.overflow is {policy!r}",
                     expected=want, found=got)
        else:
            yield _b(f"stats.overflow.{k} is {got}, impossible under overflow policy {policy!r}",
                     expected=want, found=got)


def _skipped_against_on_empty(stats: dict, on_empty):
    skipped = stats.get("skipped_rows")
    if not isinstance(skipped, dict) or on_empty == "skip":
        return
    for k, v in skipped.items():
        if v:
            yield _b(f"stats.skipped_rows.{k} is {v}, but input.tokenize.on_empty is {on_empty!r} "
                     f"(only 'skip' skips a row)", expected=0, found=v)


def _changes_against_figures(stats: dict, policy: str):
    changes, over = stats.get("changes"), stats.get("overflow")
    if not isinstance(changes, dict) or not isinstance(over, dict):
        return
    try:
        figures = OverflowStats(policy, **{k: int(over.get(k) or 0) for k in _FIGURES})
        # the rows of one token are the rows' own figure, no other block's: held to the source by
        # verify --source (verification/cover.py), here only summed into sequences_untrained
        one = int(changes.get("sequences_one_token") or 0)
        want = asdict(data_changes(figures, stats.get("skipped_rows") or {}, one))
    except (TypeError, ValueError):  # not numbers: the manifest's form checks name them
        return
    for k, v in want.items():
        if k in changes and changes[k] != v:
            yield _b(f"stats.changes.{k} is {changes[k]}, but stats.overflow and stats.skipped_rows "
                     f"under overflow policy {policy!r} give {v}", expected=v, found=changes[k])


def _b(what: str, expected=None, found=None) -> tuple[str, object, object]:
    return what, expected, found

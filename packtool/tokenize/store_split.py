"""`--split` / `--config` given with a store URI: datasets reads them for a dataset name or a local
folder, never a store URI (a store URI with them went to the Hub door: "the Hub cannot be reached;
hf download ... s3://..."). Refused, on the command line and by the library (resolve_sources) alike,
with what reads that split alone from the prefix's listing, by the rules datasets reads the same
repo with: the split's own prefix where a DatasetDict was saved there; else the README's
configuration datasets would read (repo_folder.chosen_config: the one given, else its default),
every pattern of its split (RA-3, RA-15: the first pattern of another configuration packed part
of the split, or the wrong one, rc 0); else a partition folder or the split word in the names, as
the no-split refusal names them.
"""
from __future__ import annotations

from packtool.errors import PacktoolConfigError, arg, cli_flag
from packtool.storage import is_uri, shown
from packtool.tokenize.repo_folder import (_WORD, _declared_configs, _partition, _prefix_readme, _split_of,
                                           _split_pattern, chosen_config, split_patterns)


def refuse_store_split(inputs: list[str], split: str | None, config: str | None) -> None:
    """Refuse the first store URI among `inputs` given a split or a configuration."""
    given = "split" if split else "config" if config else None
    for spec in inputs if given else ():
        if is_uri(spec):
            fix = _split_fix(spec, split, config) if split else "pass the configuration's own objects"
            raise PacktoolConfigError(f"{arg(given)} reads a dataset name or a local folder through datasets, never "
                                      f"a store URI; {fix} without {arg(given)}", path=shown(spec),
                                      flag=cli_flag(given))


def _split_fix(spec: str, split: str, config: str | None) -> str:
    """What reads `split` alone from the store URI `spec` (a prefix, or a glob matching prefixes),
    below the prefix the listing found (a glob's match, not its text). S48A-15: the fix was
    PREFIX/SPLIT/ for every prefix, which a repo of split-named files does not have. A listing
    that did not answer, or found nothing, raises what reading the input without --split says
    (RA-10, RB-13: "no object below it names split S" was said of a store never listed)."""
    from packtool.storage import check_form, expand
    from packtool.tokenize.file_kinds import kind_of
    from packtool.tokenize.readers import nothing_found
    listed: list = []
    folders: list = []
    check_form(spec, "inputs")
    try:  # a store not reached, or refusing, is its own line naming INPUTS, as without --split
        found = expand(spec, listed, name="inputs", folders=folders)
    except FileNotFoundError:
        found = []
    if not found:
        raise nothing_found(spec)
    paths = set(listed[1:])
    want = _WORD.get(split, split)
    for prefix in folders:
        base, shown_as = prefix.path.rstrip("/") + "/", prefix.shown.rstrip("/")
        rels = sorted(p[len(base):] for p in paths if p.startswith(base))
        if f"{split}/state.json" in rels:
            return f"pass that split's objects alone ({shown_as}/{split}/)"
        configs = _declared_configs(_prefix_readme(prefix, paths))
        if configs is not None:  # its declared files, as datasets reads them
            fix = _configured(configs, shown_as, split, config)
            if fix:
                return fix
            continue
        rel = next((r for r in rels if kind_of(r) and _split_of(r) == want), None)
        if rel is not None:
            part = _partition(rel)
            return f"pass that split's objects alone ({shown_as}/{part}/)" if part else \
                f"pass that split's objects alone ({shown_as}/{_split_pattern(rel)})"
    below = tuple(p.path.rstrip("/") + "/" for p in folders)
    if folders and all(f.path.startswith(below) for f in found):  # every object found was looked at
        return f"no object below it names split {split}: pass the objects that hold it"
    return "pass the objects that hold it"  # an object, or a glob's objects, matched as themselves


def _configured(configs: list, shown_as: str, split: str, config: str | None) -> str | None:
    """The fix from a README's configurations: the one datasets reads, every pattern of its split;
    where none is read without --config (or --config names none declared), each one's."""
    one = chosen_config(configs, config)
    if one is not None:
        patterns = split_patterns(one, split)
        return f"pass that split's objects alone ({' '.join(f'{shown_as}/{p}' for p in patterns)})" \
            if patterns else None
    each = [(c[0], split_patterns(c, split)) for c in configs]
    named = "; ".join(f"{n}: {' '.join(f'{shown_as}/{p}' for p in ps)}" for n, ps in each if ps)
    lead = (f"its README.md declares no configuration {config} (it declares {', '.join(c[0] for c in configs)}); "
            if config is not None else "")
    return f"{lead}pass one configuration's {split} objects alone ({named})" if named else None

"""A `datasets.save_to_disk` folder (a Dataset's: state.json, dataset_info.json, data-*.arrow; or
a DatasetDict's, dataset_dict.json over one folder per split) is one input, read as itself
wherever it is met: given by name, matched by a glob, inside a folder input, or as a prefix on
an object store (what `ds.save_to_disk("s3://...")` writes): its data files in the order its
state.json lists them, never file by file (S46A-4: its dataset_info.json was read as a .json of
rows and refused, "save the list of rows inside it", a file `datasets` owns). A DatasetDict is
refused naming its splits, one of which to pass.
"""
from __future__ import annotations

import glob
import os

from packtool.errors import PacktoolInputError

INFO, DICT, STATE = "dataset_info.json", "dataset_dict.json", "state.json"


def saved_files(folder: str) -> list[str]:
    """Data files of a `datasets.save_to_disk` folder, in the order state.json lists them."""
    if os.path.exists(os.path.join(folder, DICT)):
        splits = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
        raise PacktoolInputError(
            f"a DatasetDict folder; pass one split folder instead: {', '.join(splits)}", path=folder)
    state = os.path.join(folder, STATE)
    if os.path.exists(state):  # it decides, listing none included: an earlier save's shards are no rows (RA-3)
        names = _data_files(state)
        for n in names:
            if not os.path.isfile(os.path.join(folder, n)):
                _gone(state, n, folder)
        if not names:
            _no_rows(folder, "folder", sorted(os.path.basename(f) for f in glob.glob(
                os.path.join(glob.escape(folder), "*.arrow"))), listed=True)
        return [os.path.join(folder, n) for n in names]
    found = sorted(glob.glob(os.path.join(glob.escape(folder), "*.arrow")))
    if not found:  # a dataset of 0 rows is saved with no data file: not "no input files given"
        _no_rows(folder, "folder", [], listed=False)
    return found


def _no_rows(where: str, kind: str, stale: list[str], listed: bool):
    """A save of 0 rows: `datasets` writes no data file and lists none; shards beside it are an
    earlier save's, which `datasets` reads no more (read here, the replaced rows were packed)."""
    more = f" and {len(stale) - 5} more" if len(stale) > 5 else ""
    left = (f"; the .arrow file(s) beside it are an earlier save's, which `datasets` does not read either: "
            f"{', '.join(stale[:5])}{more}") if stale else ""
    why = "its state.json lists no data files" if listed else \
        f"no state.json, and no .arrow {'file' if kind == 'folder' else 'object'}"
    raise PacktoolInputError(f"a datasets save_to_disk {kind} holding no rows ({why}){left}: remove it from the "
                             "inputs", path=where)


def _data_files(state: str) -> list[str]:
    """The data file names a state.json (a local path or a store URI) lists, in its order: the
    one read of it for every door; one packtool cannot read is one line naming it."""
    from packtool.tokenize.json_depth import load_json_file
    try:
        # no `_data_files` key is no datasets state.json (save_to_disk writes it, [] for 0 rows), not "lists none"
        names = [d["filename"] for d in load_json_file(state, "datasets state.json")["_data_files"]]
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # bad JSON, a key twice, another shape
        if isinstance(e, PacktoolInputError):
            raise
        raise PacktoolInputError(f"is not a datasets state.json packtool reads ({type(e).__name__}: "
                                 f"{' '.join(str(e).split())}); save the dataset again with save_to_disk",
                                 path=state) from None
    # save_to_disk writes plain file names beside state.json; a downloaded or shared folder's
    # state.json naming `../x.arrow` or an absolute path made packtool read (and pack) a file
    # outside the folder the user gave (S48A-17): held to names inside it, each once
    seen = set()
    for n in names:
        if not isinstance(n, str) or n in ("", ".", "..") or "/" in n or "\\" in n or os.path.isabs(n):
            raise PacktoolInputError(f"lists {_entry(n)} among its _data_files, which is not a file name inside "
                                     "its folder (save_to_disk writes none such): save the dataset again with "
                                     "save_to_disk, or pass the data files you mean to read", path=state)
        if n in seen:
            raise PacktoolInputError(f"lists {_entry(n)} more than once among its _data_files (save_to_disk "
                                     "writes each once): save the dataset again with save_to_disk", path=state)
        seen.add(n)
    return names


def _entry(name: object) -> str:
    """A state.json entry as a message quotes it: a third party's text, bounded."""
    text = name if isinstance(name, str) else repr(name)
    return repr(text if len(text) <= 200 else text[:200] + "...")


def _gone(state: str, name: str, folder: str):
    raise PacktoolInputError(f"lists {_entry(name)}, which is not in {folder}: the folder is incomplete (a copy "
                             "or download cut short?): save it again with save_to_disk, or copy it whole",
                             path=state)


def saved_matches(paths: list[str], quiet: bool = False) -> list[str]:
    """A local glob's matches (in path order) with each save_to_disk folder whose
    dataset_info.json or dataset_dict.json is among them given as the folder, where its first
    match sorts, in place of its files: read as itself, as `saved_objects` does a store glob's
    (file by file its dataset_info.json and state.json were rows; a glob matching only some of
    its .arrow files reads those, as asked, less an earlier save's: `_current`)."""
    marks = sorted(os.path.dirname(p) for p in paths if os.path.basename(p) in (INFO, DICT))
    saved = [d for d in marks if not any(d.startswith(o + os.sep) for o in marks)]
    if not saved:
        return _current(paths, os.path.dirname, saved_state, lambda p: p, quiet)
    out, done = [], set()
    for p in paths:
        home = next((d for d in saved if p == d or p.startswith(d + os.sep)), None)
        if home is None:
            out.append(p)
        elif home not in done:
            done.add(home)
            out.append(home)
    return out


def _current(found: list, parent, state_of, path_of, quiet: bool, shown=lambda home: home) -> list:
    """A glob's matches less the .arrow files of a save_to_disk folder that its state.json does not
    list: `datasets` leaves an earlier save's shards beside a new one (a notebook saving a filtered
    dataset into its folder again), and reads only the listed ones; read here, the rows the user
    replaced were trained on too (S48A-5). Each folder's are named in a note unless `quiet`.
    A folder is a save_to_disk folder on the one proof every door asks (is_saved_folder: a file
    named state.json alone is also other tools', RA-2). `parent` (a match's folder), `state_of`
    (the folder's state.json to read, or None: no such folder), `path_of` and `shown` spell a match
    and its folder, local or on a store."""
    listed: dict = {}
    out, left = [], {}
    for x in found:
        p = path_of(x)
        if p.endswith(".arrow"):
            home = parent(x)
            if home not in listed:
                state = state_of(home)
                listed[home] = None if state is None else set(_data_files(state))
            if listed[home] is not None and p.rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1] not in listed[home]:
                left.setdefault(home, []).append(p.rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1])
                continue
        out.append(x)
    if not quiet:
        for home, names in left.items():
            _say_stale(shown(home), names, bool(listed[home]))
    return out


def _say_stale(home: str, names: list[str], rows: bool = True) -> None:
    from packtool.notes import note
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    # a save of 0 rows lists none: the folder itself is no input either (saved_files refuses it)
    fix = "give the folder itself to read it as saved, or" if rows else \
        "its save holds no rows (its state.json lists no data files);"
    note(f"{home}: passed over {len(names)} .arrow file(s) its state.json does not list (an earlier "
         f"save_to_disk's shards, which `datasets` does not read either): {', '.join(sorted(names)[:5])}"
         f"{more}; {fix} delete them to silence this note")


def stale_named(specs: list[str], quiet: bool = False) -> set[int]:
    """The indexes of inputs to pass over: .arrow files named one by one, as the shell expands an
    unquoted `std2/*.arrow`, that their save_to_disk folder's state.json does not list, named beside
    one it lists: read, the earlier save's rows were trained on too (S49A-9), where the quoted glob
    passes them over (`_current`). Such files alone (no listed one named) are read as asked."""
    from packtool.storage import is_uri
    groups: dict = {}
    for i, s in enumerate(specs):
        if not isinstance(s, str) or not s.endswith(".arrow"):
            continue
        if is_uri(s):
            if not any(c in s for c in "*?["):
                groups.setdefault(s.rsplit("/", 1)[0], []).append(i)
        elif os.path.isfile(s):
            groups.setdefault(os.path.dirname(os.path.abspath(s)), []).append(i)
    skip: set[int] = set()
    for home, idx in groups.items():
        if len(idx) < 2:
            continue
        uri = is_uri(specs[idx[0]])
        state = saved_state(home)
        if state is None:  # no save_to_disk folder: every file named is read, as the glob reads them
            continue
        listed = set(_data_files(state))
        name = {i: specs[i].rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1] for i in idx}
        stale = [i for i in idx if name[i] not in listed]
        if stale and len(stale) < len(idx):
            skip.update(stale)
            if not quiet:
                shown = state.rsplit("/", 1)[0] if uri else os.path.dirname(specs[idx[0]]) or "."
                _say_stale(shown, [name[i] for i in stale])
    return skip


def saved_state(home) -> str | None:
    """The state.json to read of `home` (a local folder, a store prefix URI or Location) where it
    is a save_to_disk folder on the one proof every door asks (`is_saved_folder`: dataset_info.json
    or dataset_dict.json beside it; a state.json alone is other tools' too, RA-2: the .arrow files
    named one by one beside one were dropped or refused where the glob read them); else None."""
    from packtool.storage import is_uri, locate
    if isinstance(home, (str, os.PathLike)) and not is_uri(os.fspath(home)):
        state = os.path.join(home, STATE)
        return state if is_saved_folder(home) and os.path.isfile(state) else None
    loc = locate(home) if isinstance(home, str) else home
    if not any(loc.join(n).is_file() for n in (INFO, DICT)):
        return None
    state = loc.join(STATE)
    return state.shown if state.is_file() else None


def is_saved_folder(path: str) -> bool:
    """A `datasets.save_to_disk` folder (a Dataset's, or a DatasetDict's): read as itself wherever
    it is met, given by name, matched by a glob or inside a folder input (S46A-4: file by file,
    its dataset_info.json was "not rows"), never file by file."""
    return os.path.exists(os.path.join(path, INFO)) or os.path.exists(os.path.join(path, DICT))


def saved_folders_below(folder: str, files: list[str]) -> tuple[list[str], list[str]]:
    """(the files not inside one, the outermost save_to_disk folders) below a folder input."""
    below = {d for f in files for d in _parents(f, folder)}
    hf = sorted(d for d in below if is_saved_folder(d))
    hf = [d for d in hf if not any(d.startswith(o + os.sep) for o in hf)]  # a DatasetDict's splits: the dict
    inside = tuple(d + os.sep for d in hf)
    return [f for f in files if not f.startswith(inside)], hf


def _parents(path: str, folder: str) -> list[str]:
    """The folders between `folder` (not itself) and `path`, as `path` spells them: told by
    relpath, since the listing's paths are normalized and the folder as given may not be
    (`d//`: a text prefix test found none, and the folder's files were read one by one)."""
    out, d = [], os.path.dirname(path)
    while d:
        rel = os.path.relpath(d, folder)
        if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep):
            break
        out.append(d)
        d = os.path.dirname(d)
    return out


def saved_objects(found: list, quiet: bool = False, listed: bool = True) -> list:
    """Object-store inputs (Locations, in path order) with each save_to_disk prefix among them
    read as itself: its data objects in state.json's order where its name sorts, its other
    objects (state.json, dataset_info.json) no input; a DatasetDict prefix refused; a glob's
    .arrow objects less an earlier save's (`_current`; `listed` False: one object named by its
    URI, read as asked)."""
    marks = sorted(x.path.rsplit("/", 1)[0] for x in found if x.path.rsplit("/", 1)[-1] in (INFO, DICT))
    saved = [d for d in marks if not any(d.startswith(o + "/") for o in marks)]
    if not saved and not listed:
        return found
    if not saved:
        from packtool.storage import prefix_of
        homes: dict = {}  # one Location per prefix: `_current` keys its state.json read by it

        def parent(x):
            d = x.path.rsplit("/", 1)[0]
            homes.setdefault(d, prefix_of(x, d))
            return d

        return _current(found, parent, lambda home: saved_state(homes[home]), lambda x: x.path, quiet,
                        lambda home: homes[home].shown)
    by_path = {x.path: x for x in found}
    out, done = [], set()
    for x in found:
        home = next((d for d in saved if x.path.startswith(d + "/")), None)
        if home is None:
            out.append(x)
        elif home not in done:
            done.add(home)
            out += _saved_prefix(home, by_path)
    return out


def _saved_prefix(home: str, by_path: dict) -> list:
    """The data objects of the save_to_disk prefix `home` (an Arrow path), in state.json's order."""
    below = {p: x for p, x in by_path.items() if p.startswith(home + "/")}
    from packtool.storage import prefix_of
    root = prefix_of(next(iter(below.values())), home)
    if f"{home}/{DICT}" in below:
        splits = sorted({p[len(home) + 1:].split("/")[0] for p in below if "/" in p[len(home) + 1:]})
        raise PacktoolInputError(f"a DatasetDict prefix; pass one split prefix instead: {', '.join(splits)}",
                                 path=root.shown)
    arrows = [x for p, x in sorted(below.items()) if p.endswith(".arrow") and "/" not in p[len(home) + 1:]]
    if f"{home}/{STATE}" in below:  # it decides, listing none included (RA-3), as saved_files
        names = _data_files(below[f"{home}/{STATE}"].shown)
        if not names:
            _no_rows(root.shown, "prefix", [x.path.rsplit("/", 1)[-1] for x in arrows], listed=True)
        out = []
        for n in names:  # an object a glob's listing did not hold may still be there: asked for
            x = below.get(f"{home}/{n}") or root.join(n)
            if f"{home}/{n}" not in below and not x.is_file():
                _gone(below[f"{home}/{STATE}"].shown, n, root.shown)
            out.append(x)
        return out
    if not arrows:
        _no_rows(root.shown, "prefix", [], listed=False)
    return arrows


__all__ = ["INFO", "DICT", "STATE", "is_saved_folder", "saved_files", "saved_folders_below", "saved_matches",
           "saved_objects", "stale_named"]

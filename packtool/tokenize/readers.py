"""Readers: every supported input format streamed as Arrow record batches.

Here: the files an input names (`resolve_inputs`: files, folders, globs, object-store
prefixes; a `datasets.save_to_disk` folder is a list of Arrow IPC stream files) and the stream
each file is read by (`iter_batches`, `peek_columns`, `count_rows`). The formats' own readers:
`columnar_readers` (Parquet, Arrow IPC), `text_readers` (JSON Lines, JSON arrays), `csv_reader`
(CSV/TSV).
Memory stays bounded by one block / batch, except for JSON arrays (bounded by the file).
"""
from __future__ import annotations

import glob
import gzip
import os
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from packtool.errors import PacktoolInputError, arg
from packtool.notes import note
from packtool.output.files import describe_kind, refuse_special_input
from packtool.storage import arrow_file, check_form, expand, is_file, is_uri, local_glob, locate, outermost
from packtool.tokenize.own_trees import OwnTrees, StoreTrees, refuse_inside_entry, refuse_object_in_entry
from packtool.tokenize.read_checks import read_failed, refuse_repeated_names
from packtool.tokenize.repeats import origins, refuse_repeats
from packtool.tokenize.repo_folder import refuse_repo_folder, refuse_repo_prefix
from packtool.tokenize.saved_folder import (is_saved_folder, saved_files, saved_folders_below, saved_matches,
                                            saved_objects, stale_named)
from packtool.tokenize.csv_reader import csv_batches, csv_delimiter, csv_error, csv_names
from packtool.tokenize.byte_kinds import misnamed, said_by_bytes
from packtool.tokenize.columnar_readers import arrow_batches, open_arrow, parquet_batches
from packtool.tokenize.file_kinds import READ_KINDS, listed_data, unreadable
from packtool.tokenize.file_kinds import kind_of as _kind_of
from packtool.tokenize.text_readers import JSONL_CODECS, json_array_batches, jsonl_batches
from packtool.tokenize.unlisted import refuse_unlisted

@dataclass(frozen=True)
class InputFile:
    """One concrete file to read. `kind`: parquet | jsonl | json | arrow | csv."""
    path: str
    kind: str


def _folder_files(folder: str, own: OwnTrees, passed: list, quiet: bool) -> list[str]:
    """The regular files below a folder input, less packtool's own trees (`own`); each real
    folder walked once (`passed` gets the links not followed: storage.local_walk). An entry that
    is no regular file is judged by _refuse_odd_entries; a folder below that cannot be listed is
    refused; any other (a FIFO of no data name) is returned, to be named in the passed-over note."""
    unlisted: list = []
    entries = own.keep([f for f in local_glob(os.path.join(glob.escape(folder), "**", "*"), passed, unlisted)
                        if not os.path.isdir(f)])
    refuse_unlisted(folder, unlisted, quiet)
    _refuse_odd_entries(folder, entries, folder, "folder holds")
    return entries


def _refuse_odd_entries(spec: str, entries: list[str], base: str, what: str) -> None:
    """The one rule for the entries a local listing meets that are not regular files (a folder
    input's walk, a glob's matches: RA-1, a glob passed a link to nothing over as a file of no data
    kind): a data file's name on something else (a FIFO, a device) is refused naming each, as each
    is when named directly, and so is a link to nothing of any name (what it stood for, a folder
    whose mount is gone, cannot be known); passing over either drops rows without a word."""
    odd = sorted(f for f in entries if (_kind_of(f) or unreadable(f)) and not os.path.isfile(f))
    if odd:
        named = ", ".join(f"{os.path.relpath(f, base)} ({describe_kind(f)})" for f in odd)
        raise PacktoolInputError(f"{what} data files that are not regular files: {named}; packtool "
                                 f"reads an input more than once: save each to a regular file, or move it "
                                 f"out of the folder", path=spec)
    if dangling := sorted(f for f in entries if os.path.islink(f) and not os.path.exists(f)):
        named = ", ".join(f"{os.path.relpath(f, base)} -> {_target(f)}" for f in dangling[:5])
        more = f" and {len(dangling) - 5} more" if len(dangling) > 5 else ""
        raise PacktoolInputError(f"{what} a symbolic link to nothing: {named}{more}; the rows it stood "
                                 f"for would be left out: restore its target (a mount, a pruned run), or "
                                 f"remove the link", path=spec)


def _target(link: str) -> str:
    try:
        return os.readlink(link)
    except OSError:  # replaced since it was listed
        return "?"


def refuse_odd_files(folder: str) -> None:
    """A folder read by another door (a repo folder's --split: datasets' patterns pass over a link to
    nothing and a FIFO, S49A-2) held to the folder door's rule for what is not a regular file."""
    _folder_files(folder, OwnTrees(folder, folder), [], quiet=True)  # its notes: the split read's own


def stdin_refused(name: str = "inputs") -> PacktoolInputError:
    """`-` among the inputs (argument `name`): a stream has no bytes to key the cache by."""
    said = arg(name)
    return PacktoolInputError(f"{said} '-' would read stdin, which is not supported (the cache key is the file's "
                              f"bytes); save the data to a file, e.g. `... > data.jsonl`, and pass its path",
                              path="-", flag=said if said != name else None)


def resolve_inputs(inputs: list[str], quiet: bool = False) -> list[InputFile]:
    """Expand files, folders and globs into files in a deterministic read order. packtool's
    own trees below a folder or a glob's fixed part are passed over, noted unless `quiet`
    (a second resolution of the same inputs)."""
    return [f for each in resolve_each(inputs, quiet) for f in each]


def resolve_each(inputs: list[str], quiet: bool = False) -> list[list[InputFile]]:
    """resolve_inputs' files, one list per input: one resolution, its checks over all, its notes
    said once (each path resolved again alone said each twice, and read a shared file twice: RA-10)."""
    if not inputs:
        raise PacktoolInputError("no input files given")
    out: list[InputFile] = []
    owns: list[OwnTrees] = []
    links: dict[str, list] = {}  # spec -> links to folders not followed (walked already, or a loop)
    above: dict[str, None] = {}  # folders above the paths named, asked once whether a cache entry
    marks: list[tuple[int, int, str | None]] = []  # (first file, spec's index, the folder a folder or glob types)
    stale = stale_named(inputs, quiet)  # a shell-expanded `std2/*.arrow`: as the quoted glob reads it
    for i, spec in enumerate(inputs):
        globbed = not is_uri(spec) and any(c in spec for c in "*?[") and not os.path.exists(spec)
        folder = not is_uri(spec) and not globbed and os.path.isdir(spec)
        marks.append((len(out), i, _glob_base(spec) if globbed else spec if folder else None))
        if i in stale:
            continue
        if spec == "-":
            raise stdin_refused()
        if is_uri(spec):
            out += _store_files(spec, owns, quiet, above)
            continue
        # an existing path is itself even when its name holds glob characters (`run[1].jsonl`)
        if any(c in spec for c in "*?[") and not os.path.exists(spec):
            owns.append(OwnTrees(spec, _glob_base(spec)))
            # the files of a save_to_disk folder among the matches: the folder, read as itself; a
            # folder matched is read whole, the matches below it through it (`DIR/**/*`: once)
            unlisted: list = []
            paths = outermost(saved_matches(owns[-1].keep(sorted(local_glob(spec, links.setdefault(spec, []),
                                                                             unlisted))), quiet))
            refuse_unlisted(spec, unlisted, quiet, _glob_base(spec))
            if not paths:
                raise PacktoolInputError("glob matched no files" + owns[-1].only_own(), path=spec)
            for p in paths:  # before the data kinds are judged: a glob of an entry's files is the entry's (RA-9)
                refuse_inside_entry(p, above)
            paths = _glob_data(spec, paths, owns[-1].names_a_tree(), quiet)
            glob_owns = len(owns) - 1
        else:
            paths = [spec]
        for p in paths:
            refuse_inside_entry(p, above)
            if os.path.isdir(p):
                if is_saved_folder(p):
                    out += [InputFile(f, "arrow") for f in saved_files(p)]
                    continue
                owns.append(OwnTrees(p, p))
                found, hf = saved_folders_below(p, _folder_files(p, owns[-1], links.setdefault(spec, []), quiet))
                # a tree of packtool's named itself: its other files are its own (own_trees)
                inner = sorted(f for f, _ in listed_data(p, sorted((f, os.path.relpath(f, p)) for f in found),
                                                         "folder holds", owns[-1].names_a_tree(), quiet))
                if not inner and not hf:
                    if globbed:  # one of the glob's matches (a docs/ beside data/): judged with the others, as
                        continue  # a store glob's prefixes and `DIR/**` are (S49A-5); its other files noted
                    raise PacktoolInputError(
                        f"folder holds no data files packtool reads ({READ_KINDS})" + owns[-1].only_own(), path=p)
                saved = {d: saved_files(d) for d in hf}
                # every split of a dataset repo, test rows too: not silently; a save_to_disk folder's
                # data files are judged with the others (`sd/train` + `sd/test` saved one by one, S48A-9)
                refuse_repo_folder(p, inner + [x for d in hf for x in saved[d]])
                for f in inner:  # a repo cloned without git-lfs: its files are pointers, said as such
                    refuse_special_input(f)
                for f in sorted(inner + hf):  # in path order, a save_to_disk folder where its name sorts (as a glob)
                    out += [InputFile(x, "arrow") for x in saved[f]] if f in saved else [InputFile(f, _kind_of(f))]
            elif not os.path.exists(p):
                raise PacktoolInputError("input file not found", path=p)
            else:
                refuse_special_input(p)
                kind = _kind_of(p)
                if kind is None:
                    raise PacktoolInputError(
                        f"unknown file type; expected {READ_KINDS} or a datasets.save_to_disk folder", path=p)
                out.append(InputFile(os.path.abspath(p), kind))
        if globbed and len(out) == marks[-1][0]:  # every folder it matched held no data
            own = next((x for o in owns[glob_owns:] if (x := o.only_own())), "")
            raise PacktoolInputError(f"glob matched no data files packtool reads ({READ_KINDS}){own}", path=spec)
    if not quiet:
        for own in owns:
            own.say()
        for spec, passed in links.items():
            _say_links(spec, passed)
    files = [f if is_uri(f.path) else InputFile(os.path.abspath(f.path), f.kind) for f in out]
    origin = origins(marks, len(files))
    spec_of = {f.path: k for f, (k, _) in zip(files, origin)}  # a path twice is refused: one input each
    each: list[list[InputFile]] = [[] for _ in inputs]
    for f in refuse_repeats(files, origin, inputs, quiet):
        each[spec_of[f.path]].append(f)
    return each


def _glob_data(spec: str, paths: list[str], mine: bool, quiet: bool) -> list[str]:
    """A local glob's matches less the files of no kind packtool reads, judged as a folder's and a
    store glob's are (file_kinds.listed_data: refused, or passed over with a note; M5: one was
    "unknown file type" here alone); its folders are judged when read. None left is said so."""
    base = _glob_base(spec)
    files = [p for p in paths if not os.path.isdir(p)]
    _refuse_odd_entries(spec, files, base, "glob matched")
    kept = {p for p, _ in listed_data(spec, [(p, os.path.relpath(p, base)) for p in files], "glob matched",
                                      mine, quiet)}
    out = [p for p in paths if p in kept or os.path.isdir(p)]
    if not out:
        raise PacktoolInputError(f"glob matched no data files packtool reads ({READ_KINDS})", path=spec)
    return out


def _say_links(spec: str, passed: list) -> None:
    """One note per input for the links to folders its walk did not follow: nothing is left
    out (each file is read once, by its own name), but a link the user may count on is named."""
    pairs = list(dict.fromkeys(passed))
    if not pairs:
        return
    more = f", and {len(pairs) - 4} more" if len(pairs) > 4 else ""
    note(f"{spec}: did not follow {len(pairs)} link(s) to a folder read already or holding the link "
         f"(a loop): {', '.join(f'{a} -> {b}' for a, b in pairs[:4])}{more}; each file below is read "
         f"once, by its own name")


def _glob_base(spec: str) -> str:
    """The folder a glob's matches lie below: its path up to the first glob character."""
    head = spec[:min(spec.index(c) for c in "*?[" if c in spec)]
    return os.path.dirname(head) or "."


def nothing_found(spec: str) -> PacktoolInputError:
    """A store URI whose listing found nothing: what reading it says, and --split's refusal of it
    (store_split) alike."""
    return PacktoolInputError("glob matched no objects" if any(c in spec for c in "*?[")
                              else "input not found (no such object or prefix)", path=locate(spec).shown)


def _store_files(spec: str, owns: list, quiet: bool = False, above: dict | None = None) -> list[InputFile]:
    """An object-store URI: one object, every data object below a prefix, or a glob's
    matches (packtool.storage.globs.expand), each named by its URI without secrets."""
    listed: list = []
    folders: list = []  # the prefixes read whole: a folder input's rules apply to each
    check_form(spec, "inputs")  # its text refused naming the argument, before a request
    try:
        found = expand(spec, listed, name="inputs", folders=folders)  # a store not reached names the argument
    except FileNotFoundError:
        found = []
    one = len(found) == 1 and found[0].path == locate(spec).path
    if one:
        refuse_object_in_entry(found[0], {} if above is None else above)
    own = StoreTrees(spec, listed[0], listed[1:]) if listed else None
    if own is not None:
        owns.append(own)
        found = own.keep(found)
        if not found and own.skipped:
            said = "glob matched no objects" if any(c in spec for c in "*?[") else "prefix holds no data objects"
            raise PacktoolInputError(said + own.only_own(), path=locate(spec).shown)
    found = saved_objects(found, quiet, listed=not one)  # a datasets save_to_disk prefix read as itself, as a local folder is
    if not found:
        raise nothing_found(spec)
    if one and not _kind_of(found[0].path):
        raise PacktoolInputError(f"unknown file type, or data packtool cannot read; expected {READ_KINDS}: "
                                 f"decompress or convert it, or pass the readable objects themselves",
                                 path=found[0].shown)
    mine = own is not None and own.names_a_tree()  # a tree of packtool's named itself: its files are its own
    base = locate(spec).shown.rstrip("/")
    globbed = any(c in spec for c in "*?[")
    by_path = {x.path: x for x in found}
    data = [by_path[path] for path, _ in listed_data(
        base, [(x.path, x.shown[len(base) + 1:] if x.shown.startswith(base + "/") else x.shown) for x in found],
        "glob matched" if globbed else "prefix holds", mine, quiet)]
    if not data:
        raise PacktoolInputError(f"{'glob matched' if globbed else 'prefix holds'} no data objects packtool reads "
                                 f"({READ_KINDS})", path=locate(spec).shown)
    files = [InputFile(x.shown, _kind_of(x.path)) for x in data]
    for prefix in folders:  # every split of a dataset repo, test rows too: not silently
        refuse_repo_prefix(prefix, data, set(listed[1:]))
    return files


def read_json_lines(path: str) -> pa.Table:
    """A whole JSON Lines file as one table, with this module's errors (they name the line)."""
    batches = list(jsonl_batches(path, 1 << 20, None))
    return pa.Table.from_batches(batches) if batches else pa.table({})


_READERS = {"parquet": parquet_batches, "arrow": arrow_batches,
            "jsonl": jsonl_batches, "json": json_array_batches, "csv": csv_batches}


def iter_batches(f: InputFile, batch_size: int, columns: list[str] | None = None,
                 read_bytes=None, blank=None, judge=None) -> Iterator[pa.RecordBatch]:
    """Record batches of at most `batch_size` rows, in file order. `columns` projects when the
    format allows it (JSON rows are parsed whole, then projected). `read_bytes`: see
    `text_readers.jsonl_batches` (JSON Lines and CSV). `blank`: a blank_lines.BlankLines that
    hears the blank lines JSON Lines (a .json file may hold JSON Lines) and CSV/TSV skip.
    `judge`: a late_columns.LateColumns that sees every key of a JSON file's rows."""
    if not is_file(f.path):
        raise PacktoolInputError("input file not found", path=f.path)
    more = {}
    if f.kind in ("jsonl", "csv") and read_bytes is not None:
        more["read_bytes"] = read_bytes
    if f.kind in ("jsonl", "json") and blank is not None:
        more["blank"] = blank
    if f.kind in ("jsonl", "json") and judge is not None:
        more["judge"] = judge
    if f.kind == "csv" and blank is not None:  # its own counter: a CSV line end is the parse's to tell
        more["blank"] = blank.for_csv(csv_delimiter(f.path))
    return said_by_bytes(_READERS[f.kind](f.path, batch_size, columns, **more), f.path)


def peek_columns(f: InputFile) -> list[str]:
    """Column names, from metadata where the format has it, else from the first batch; a file
    whose bytes are another kind than its name is said so (byte_kinds)."""
    try:
        return _peek_columns(f)
    except PacktoolInputError as e:
        raise misnamed(f.path) or e from None


def _peek_columns(f: InputFile) -> list[str]:
    try:
        if f.kind in ("parquet", "arrow"):
            schema = pq.ParquetFile(arrow_file(f.path)).schema_arrow if f.kind == "parquet" else \
                open_arrow(f.path).schema
            refuse_repeated_names(schema.names, f.path, "its schema: ")
            return list(schema.names)
        if f.kind == "csv":  # the header's names, each once (csv_names)
            return csv_names(f.path)
    except (pa.ArrowInvalid, OSError, EOFError, gzip.BadGzipFile) as e:
        if f.kind == "csv":  # the reading paths' message, which names the line at fault
            raise csv_error(f.path, e) from None
        raise read_failed(e, f.path, f.kind, f"cannot read {f.kind} file ({e})") from None
    # JSON Lines: parse a small first block only (the whole first 8 MB block would be parsed twice)
    batches = jsonl_batches(f.path, 64, None, 1 << 16) if f.kind == "jsonl" else iter_batches(f, 64)
    try:
        for batch in batches:
            return list(batch.schema.names)
    except PacktoolInputError as e:  # a field of two types: its rows' keys are the names (json_types)
        if getattr(e, "columns", None) is None:
            raise
        return e.columns
    return []


def count_rows(f: InputFile) -> int | None:
    """Row count when the format stores it (for the progress bar), else None."""
    try:
        if f.kind == "parquet":
            return pq.ParquetFile(arrow_file(f.path)).metadata.num_rows
        if f.kind == "arrow":
            r = open_arrow(f.path)
            if isinstance(r, ipc.RecordBatchFileReader):
                return sum(r.get_batch(i).num_rows for i in range(r.num_record_batches))
    except (pa.ArrowInvalid, OSError):
        return None
    return None

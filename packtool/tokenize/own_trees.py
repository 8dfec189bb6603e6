"""packtool's own folders inside a data folder: what a folder or glob input passes over.

A packed output and a tokenized cache entry (`cache_root.is_cache_entry`) are packtool's trees,
not the user's data. Two rules tell an output, on purpose: a writer keeps the structural one (a
folder holding a manifest: `output.relations.packed_output_around`: it must never write into what
may be one), an input passes a folder over only on proof that packtool made it
(`manifest_name.packtool_made`: a `.manifest.json` is other tools' name too, S48A-16). Found below a folder input (or below a glob's fixed part), their
Parquet and JSON files were read as rows: a cache left in `data/` made the next `pack data`
fail on `cache.json` ("cannot tell the input shape"), and an output's slabs would be trained
on as input text. Every folder-expanding reader (`readers.resolve_inputs`: pack on both
engines, `verify --source`, `tokenize_to_cache`) passes them over with one counted note, so
nothing leaves the data without a word. A tree the user names itself (the folder given is
the output or the entry) is read as asked.

A Spark/Hadoop job's `_temporary/` (FileOutputCommitter's scratch: the task attempts of a job
that failed, was killed or is still writing, copies or half-copies of the part files committed
beside it) is no one's data either: read, its rows were packed twice. pyarrow.dataset, Spark,
Hive and `datasets` pass it over; so does this sort, with its own note (S46A-8).

A table format's folder (Delta Lake's `_delta_log/`, Apache Iceberg's `metadata/*.metadata.json`,
Apache Hudi's `.hoodie/`) is data whose listing is not its content: its log says which of its
Parquet files are the table, and those of versions removed or overwritten stay until a VACUUM;
read file by file, deleted rows were trained on beside the current ones (S47A-9). A folder, glob
or store prefix whose files lie in such a table (or below one) is refused, naming the table and
its own reader (`refuse_table`); a file named by its path is read as asked. One marker rule
(`_table_marker`) judges a local folder and a store prefix alike, the folders above the one given
included (a partition, Iceberg's data/: RA-1, where the store door looked only below it).

A tree is judged where it is found, step by step below the folder given, each step by what it
resolves to: a link inside the folder to an output or a cache (`prev -> ../out`, a shared cache
root linked in) is the same tree as a copy of it there, passed over and said as reached through
a link (it was read as data: an output's slabs refused as rows, a cache.json as "not rows").
"""
from __future__ import annotations

import glob
import os

from packtool.checkpoint_kind import is_checkpoint_folder
from packtool.errors import PacktoolError, PacktoolInputError
from packtool.manifest_name import packtool_made
from packtool.notes import note
from packtool.output.relations import packed_output_around, real_path
from packtool.storage import local_glob
from packtool.tokenize.cache_entry import packtool_entry
from packtool.tokenize.cache_root import is_cache_entry, is_store_entry
from packtool.tokenize.read_checks import cache_entry_not_data

ENTRY = "a tokenized cache entry"  # above a store prefix: StoreTrees' _tables_at holds it beside the tables
JOB_SCRATCH = "_temporary"  # the committer's folder name, at any depth below the base
_JOB = "a Spark/Hadoop job's uncommitted output"
_LINKED = " reached through a link"
# a table format's marker folder -> the table, the log it keeps, how to read its current version
_TABLES = {"_delta_log": ("a Delta Lake table", "_delta_log", "deltalake's DeltaTable(PATH).to_pyarrow_dataset()"),
           "metadata": ("an Apache Iceberg table", "metadata/*.metadata.json", "pyiceberg's table.scan().to_arrow()"),
           ".hoodie": ("an Apache Hudi table", ".hoodie timeline", "Spark's Hudi reader (spark.read.format('hudi'))")}


def refuse_inside_entry(path: str, seen: dict) -> None:
    """An input named inside a tokenized cache entry (`ENTRY/flat`, `ENTRY/data/part-00000.parquet`)
    is the entry's, not data: refused as the entry itself is (its flat/*.npy were "data files
    packtool cannot read", its parts "cannot tell the input shape"). The folders above the path as
    typed and above what it resolves to (a link to an entry's flat/ or a part: RA-9, judged by its
    name alone it got F8's old words) are asked, once each across the inputs (`seen`)."""
    for d in dict.fromkeys((os.path.dirname(os.path.abspath(path)), os.path.dirname(os.path.realpath(path)))):
        while d not in seen:
            seen[d] = None
            if is_cache_entry(d):
                raise cache_entry_not_data(d, path)
            d = os.path.dirname(d)


def refuse_table(table: str, marker: str) -> PacktoolInputError:
    what, log, reader = _TABLES[marker]
    return PacktoolInputError(
        f"{what}: its {log} says which of its Parquet files are the table now (those of removed or overwritten "
        f"versions stay until VACUUM), which a folder's files cannot tell: read it with its own reader "
        f"({reader.replace('PATH', repr(table))}) and pass that table or dataset to packtool.pack, or export "
        f"its current version to a folder of its own", path=table)


def _table_marker(has_dir, names_in) -> str | None:
    """The table format whose folder a folder is, or None: the one rule for a local folder and a
    store prefix, asked or told from a listing (`has_dir(name)`: a folder `name` is directly in it;
    `names_in(name)`: the file names directly in that folder)."""
    for marker in _TABLES:
        if has_dir(marker) and (marker != "metadata" or any(n.endswith(".metadata.json") for n in names_in(marker))):
            return marker
    return None


def _local_marker(folder: str) -> str | None:
    return _table_marker(lambda n: os.path.isdir(os.path.join(folder, n)), lambda n: _names(os.path.join(folder, n)))


def _names(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


class OwnTrees:
    """Sorts the paths found below `base` (a folder input, or a glob's fixed folder) into
    data and packtool's own trees; `say()` then notes what was passed over."""

    def __init__(self, spec: str, base: str):
        self.spec, self.base, self.real_base = spec, base, real_path(base)
        self.named_base = base  # what a tree's name is relative to (its found path, below `base`)
        self._tree_of: dict[str, tuple[str, str] | None] = {}
        self._step_of: dict[str, str | None] = {}
        self.skipped: dict[tuple[str, str], int] = {}  # (tree, what) -> files passed over
        self._in_scratch = _names_scratch(self.real_base)
        self._table_of: dict[str, None] = {}

    def keep(self, paths: list[str]) -> list[str]:
        """`paths` less those inside packtool's trees (counted); refused where one lies in a
        table format's folder (`refuse_table`)."""
        out = []
        for p in paths:
            self._refuse_table(p if os.path.isdir(p) else os.path.dirname(p))
            tree = self._tree(p if os.path.isdir(p) else os.path.dirname(p))
            if tree is None:
                out.append(p)
            else:
                self.skipped[tree] = self.skipped.get(tree, 0) + _files_in(p)
        return out

    def _refuse_table(self, folder: str) -> None:
        """`folder` (as found) and every folder above it (a table's partition folder given is the
        table's too), each once."""
        d = os.path.abspath(folder or os.curdir)
        while d not in self._table_of:
            self._table_of[d] = None
            marker = _local_marker(d)
            if marker is not None:
                raise refuse_table(d, marker)
            d = os.path.dirname(d)

    def _tree(self, folder: str) -> tuple[str, str] | None:
        """(the tree's path as found, what it is) that `folder` (as found) lies in strictly below
        the base: the outermost step below the base that is a tree, as a manifest's folder is."""
        if folder not in self._tree_of:  # by the name found: the steps' real paths once per folder
            # a relative glob's matches ('*.jsonl': folder and base '') are the working folder's
            rel = os.path.relpath(folder or os.curdir, self.base or os.curdir)
            steps = [] if rel == "." or rel.startswith("..") else rel.split(os.sep)
            self._tree_of[folder], linked = None, False
            for k in range(1, len(steps) + 1):
                step = os.path.join(self.base, *steps[:k])
                linked = linked or os.path.islink(step)
                what = self._step(step)
                if what is not None:
                    self._tree_of[folder] = step, what + (_LINKED if linked and what != _JOB else "")
                    break
        return self._tree_of[folder]

    def _step(self, step: str) -> str | None:
        """What the folder `step` resolves to is, if packtool's: never the base itself."""
        if step not in self._step_of:
            rd, what = real_path(step), None
            if rd != self.real_base:
                if not self._in_scratch and JOB_SCRATCH in (os.path.basename(step), os.path.basename(rd)):
                    what = _JOB  # the outermost `_temporary` strictly below the base, before any tree in it
                elif packed_output_around(rd, itself=True) == rd and packtool_made(rd):
                    what = "a packed output"
                elif is_cache_entry(rd):
                    what = "a tokenized cache entry"
                elif is_checkpoint_folder(rd):  # its mp_rank_XX.pt was "data packtool cannot read" (RA-15)
                    what = "a train checkpoint"
            self._step_of[step] = what
        return self._step_of[step]

    def names_a_tree(self) -> bool:
        """The base itself is one of packtool's trees or a job's scratch (named, read as asked): its
        files that are no data (an entry's flat/*.npy, a job's markers) are that tree's own,
        neither refused nor noted as the user's (file_kinds)."""
        rd = self.real_base
        return self._in_scratch or is_cache_entry(rd) or is_checkpoint_folder(rd) or (
            packed_output_around(rd, itself=True) == rd and packtool_made(rd))

    def only_own(self) -> str:
        """For "holds no data files": what was passed over, when anything was."""
        if not self.skipped:
            return ""
        if all(what == _JOB for _, what in self.skipped):
            return f" outside Spark/Hadoop `_temporary/` folders ({self.trees()}: a job's uncommitted output is not data)"
        return f" outside packtool's own folders ({self.trees()}: a packed output or cache is not data)"

    def trees(self, job: bool | None = None) -> str:
        return ", ".join(f"{os.path.join(self.base, os.path.relpath(t, self.named_base))} ({what}, {k} "
                         f"file{'s' if k != 1 else ''})" for (t, what), k in sorted(self._counted().items())
                         if job is None or (what == _JOB) == job)

    def _counted(self) -> dict[tuple[str, str], int]:
        """`skipped`, each tree once: one found by two names (a glob matching an output and a link
        to it) was counted twice (S48A-7); it is said by the name reached through no link."""
        real = {t: self._real(t) for t, _ in self.skipped}
        out, seen = {}, set()

        def linked(tree: tuple[str, str]) -> tuple[bool, bool, tuple[str, str]]:
            return tree[1].endswith(_LINKED), real[tree[0]] != tree[0], tree
        for (t, what) in sorted(self.skipped, key=linked):
            if real[t] not in seen:
                seen.add(real[t])
                out[t, what] = self.skipped[t, what]
        return out

    def _real(self, tree: str) -> str:
        return real_path(tree)

    def say(self) -> None:
        counted = self._counted()
        for job in (False, True):
            n = sum(k for (_, what), k in counted.items() if (what == _JOB) == job)
            if not n:
                continue
            files = f"{n} file{'s' if n != 1 else ''}"
            if job:
                note(f"{self.spec}: passed over {files} in Spark/Hadoop `_temporary/` folders inside it: "
                     f"{self.trees(job)}: the committer's scratch (task attempts of a job not committed, "
                     f"copies of the part files beside it), not data; pass the part files themselves to read "
                     f"them, or remove the folder once the job is done")
            else:
                note(f"{self.spec}: passed over {files} in packtool's own folders inside it, "
                     f"not data: {self.trees(job)}; move them out of the data folder (or pass the data files "
                     f"themselves) to silence this note")


class StoreTrees(OwnTrees):
    """The same below an object-store prefix (or a glob's fixed prefix), from the listing
    `storage.globs.expand` made anyway (`listed`: every object path, hidden names included): a
    prefix holding a manifest object is a packed output (manifest_name's names), one holding
    cache.json beside data/ or flat/ objects a cache entry."""

    def __init__(self, spec: str, root, listed: list[str]):
        self.spec, self.base, self.real_base = spec, root.shown.rstrip("/"), root.path.rstrip("/")
        self.named_base = self.real_base  # its trees are keyed by their store paths
        self._local = root.local
        self._tree_of, self.skipped = {}, {}
        self._trees_at = _store_trees(listed, self.real_base, root, _names_scratch(self.real_base))
        # the table's folders at or below the prefix, from the listing; above it, asked (a
        # partition prefix or Iceberg's data/ given is the table's, as a local one is: RA-1)
        self._tables_at = {**_store_tables_above(root, self.real_base, self._shown),
                           **_store_tables(listed, self.real_base)}
        # the base itself by the same proof as a tree below it (its key is never a tree's: _tree)
        self._named_tree = _names_scratch(self.real_base) or self.real_base in self._trees_at

    def names_a_tree(self) -> bool:
        return self._named_tree

    def _real(self, tree: str) -> str:
        return real_path(tree) if self._local else tree  # a file:// listing follows links; a store has none

    def keep(self, locs: list) -> list:
        out = []
        for x in locs:
            d = x.path.rsplit("/", 1)[0]
            while True:  # up to the bucket's root, which has no "/" above it
                if d in self._tables_at:
                    if self._tables_at[d] == ENTRY:
                        raise cache_entry_not_data(self._shown(d), self.base)
                    raise refuse_table(self._shown(d), self._tables_at[d])
                if "/" not in d:
                    break
                d = d.rsplit("/", 1)[0]
            tree = self._tree(x.path.rsplit("/", 1)[0])
            if tree is None:
                out.append(x)
            else:
                self.skipped[tree] = self.skipped.get(tree, 0) + 1
        return out

    def _shown(self, d: str) -> str:
        """The prefix `d` (a store path at, below or above the base) as the user's URI names it."""
        if d == self.real_base or d.startswith(self.real_base + "/"):
            return self.base + d[len(self.real_base):]
        return self.base.rsplit("/", self.real_base.count("/") - d.count("/"))[0]  # names, not characters

    def _tree(self, folder: str) -> tuple[str, str] | None:
        if folder not in self._tree_of:
            d, self._tree_of[folder] = folder, None
            while d.startswith(self.real_base + "/"):
                if d in self._trees_at:
                    self._tree_of[folder] = d, self._trees_at[d]
                d = d.rsplit("/", 1)[0]  # the outermost tree wins, as a manifest's folder does locally
        return self._tree_of[folder]


def _names_scratch(base: str) -> bool:
    """The base is a job's `_temporary` or lies inside one: the user named the scratch itself,
    which is read as asked (its nested `_temporary` folders included)."""
    return JOB_SCRATCH in base.replace("\\", "/").split("/")


def _store_trees(listed: list[str], base: str, root, in_scratch: bool) -> dict[str, str]:
    from packtool.manifest_name import LEGACY_MANIFEST, MANIFEST, is_shard_name, names_this_format
    from packtool.tokenize.cache_entry import packtool_entry
    from packtool.tokenize.cache_parts import DATA_DIR
    folders: set[str] = set()  # every folder (prefix) an object lies in, at any depth
    inside: dict[str, list[str]] = {}  # folder -> the names of the objects directly in it
    for p in listed:
        if "/" in p:
            inside.setdefault(p.rsplit("/", 1)[0], []).append(p.rsplit("/", 1)[1])
        while "/" in p and (p := p.rsplit("/", 1)[0]) not in folders:
            folders.add(p)
    out = {}
    for p in listed:
        d, name = p.rsplit("/", 1) if "/" in p else ("", p)
        if not (d == base or d.startswith(base + "/")):
            continue
        # on proof only, as locally (manifest_name.packtool_made, cache_entry.packtool_entry): a
        # manifest naming the format or shards beside it; a cache.json sealed or parts beside it
        if name in (MANIFEST, LEGACY_MANIFEST) and (any(is_shard_name(n) for n in inside.get(d, ())) or
                                                    names_this_format(root.join(p[len(base) + 1:]))):
            out[d] = "a packed output"
        elif name == "cache.json" and (f"{d}/{DATA_DIR}" in folders or f"{d}/flat" in folders) and packtool_entry(
                root.join(p[len(base) + 1:]), inside.get(f"{d}/{DATA_DIR}", ()), inside.get(f"{d}/flat", ())):
            out.setdefault(d, "a tokenized cache entry")
    if not in_scratch:
        out.update({d: _JOB for d in folders if d.startswith(base + "/") and d.rsplit("/", 1)[1] == JOB_SCRATCH})
    return out


def _store_tables(listed: list[str], base: str) -> dict[str, str]:
    """The table formats' folders at or below `base` in a store listing: folder -> marker."""
    names: dict[str, set[str]] = {}  # every prefix at or below base -> the object names directly in it
    for p in listed:
        if p.startswith(base + "/"):
            d, name = p.rsplit("/", 1)
            names.setdefault(d, set()).add(name)
            while d != base and (d := d.rsplit("/", 1)[0]) not in names:
                names[d] = set()
    out = {}
    for d in names:
        marker = _table_marker(lambda n: f"{d}/{n}" in names, lambda n: names.get(f"{d}/{n}", ()))
        if marker is not None:
            out[d] = marker
    return out


def _store_tables_above(root, base: str, shown) -> dict[str, str]:
    """The table formats' folders strictly above the prefix `base` (up to its bucket), asked of
    the store (`root`: the listed prefix's Location; `shown(path)`: a path's URI): a few requests
    per prefix above, each bounded whatever the prefix holds."""
    from dataclasses import replace

    from pyarrow.fs import FileType
    out, d = {}, base
    while "/" in d:
        d = d.rsplit("/", 1)[0]
        at = lambda n: replace(root, path=f"{d}/{n}", shown=f"{shown(d)}/{n}")  # noqa: E731
        try:
            marker = _table_marker(lambda n: root.info_of(f"{d}/{n}").type == FileType.Directory,
                                   lambda n: at(n).names())
            if marker is None and is_store_entry(root, d, shown(d)):
                marker = ENTRY  # a prefix inside a tokenized cache entry (its flat/, data/): the entry's
        except PacktoolError:  # credentials for the prefix alone (its listing answered): nothing to see above
            break
        if marker is not None:
            out[d] = marker
    return out


def refuse_object_in_entry(loc, seen: dict) -> None:
    """A store object named by its path that lies in a tokenized cache entry (ENTRY/data/part-*.parquet)
    is refused as a local one is (refuse_inside_entry); a table's file so named is read as asked.
    Each prefix above is asked once across the inputs (`seen`, as the local door's folders), and
    only whether it is an entry (RA-13: asked per parent, table markers too, objects named one by
    one under date prefixes paid 4 requests per ancestor per parent)."""
    def shown(d: str) -> str:
        return loc.shown.rsplit("/", loc.path.count("/") - d.count("/"))[0]
    d = loc.path
    while "/" in d:
        d = d.rsplit("/", 1)[0]
        if shown(d) in seen:  # asked, and every prefix above it (keyed by URI: another store's bucket is another)
            return
        seen[shown(d)] = None
        try:
            entry = is_store_entry(loc, d, shown(d))
        except PacktoolError:  # credentials for the object alone: nothing to see above
            return
        if entry:
            raise cache_entry_not_data(shown(d), loc.shown)


def _files_in(path: str) -> int:
    """The files a folder input would find in `path` (hidden names passed over, each real folder
    once): a glob's match counted by os.walk's rule was a file more (the hidden manifest) than
    the same output below a folder or a store prefix (S48A-7)."""
    if not os.path.isdir(path):
        return 1
    return sum(not os.path.isdir(f) for f in local_glob(os.path.join(glob.escape(path), "**", "*")))


__all__ = ["OwnTrees", "StoreTrees", "refuse_inside_entry", "refuse_object_in_entry", "refuse_table"]

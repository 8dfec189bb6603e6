"""The slab format's one owner: the manifest (write, read, validate, defaults), `SlabManifest`
(a manifest validated, what a reader of the slabs needs) and the format's errors, over its three
parts: `slabs.schema` (the shards' Parquet schema), `slabs.names` (the names of a packed
output's files) and `slabs.provenance` (the manifest's record of where the slabs came from). FORMAT.md is its prose; verify, inspect, the Megatron dataset
(`slabs.reader`) and users' own readers all go through here.

A packed output is a folder of shards plus the manifest, written last: its presence means the
output is whole (docs/DESIGN.md, "The slab format").
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import pyarrow as pa

from packtool import __version__
from packtool.align import Alignment, AlignmentError
from packtool import manifest_name
from packtool.errors import PacktoolFormatError
from packtool.planning.core import PackingConfig, Plan, PlanError, config_dict, config_from_dict
from packtool.side import SideColumn, side_columns_from_manifest, side_columns_to_manifest

# MANIFEST, LEGACY_MANIFEST, manifest_file and is_shard_name are importable from here too, where
# FORMAT.md and DESIGN.md name them; every other name is imported from names.py / schema.py
from packtool.slabs.names import (  # noqa: F401
    LEGACY_MANIFEST,
    MANIFEST,
    SHARD_FORMS,
    is_output_shard_name,
    is_shard_name,
    join,
    manifest_file,
    open_file,
)
from packtool.slabs.fields import FieldError, check_fields, check_side_counts
from packtool.slabs.numbers import NUMBER_RANGES, check_numbers  # noqa: F401  (NUMBER_RANGES: asked from here)
from packtool.slabs.schema import SCHEMA_VERSION, slab_schema
from packtool.storage import bucket_gone, is_uri, locate, reading

FORMAT_NAME = manifest_name.FORMAT_NAME  # kept below the stages: tokenize.own_trees asks it too


# A manifest lists the inputs, shards and settings: kilobytes, megabytes for 100,000s of input
# files. Over this it is damaged or not a manifest, and is refused before it is read whole.
MANIFEST_BYTES = 256 << 20


class FormatError(PacktoolFormatError):
    """A packed output that this packtool cannot read: no manifest, another format or
    version, a damaged or edited manifest, a shard name that leaves the folder."""


class NotAnOutputError(FormatError):
    """The path given as a packed output is not there, or is a file (an object), not a folder
    (a prefix): nothing to read or check, a bad input (exit 2 in every command, verify too)."""


# 2: optional per-token side columns and their counts (schema.py). Version 1 (written before
# 2026-12-01) lacks the manifest fields every reader and verify hold a version 2 output to
# (side_columns, stats.side_nan / side_inf, input.tokenize's columns): refused in one line, never
# read by some readers and not others.
READ_VERSIONS = (2,)
OLD_VERSION = ("schema_version 1, written by a packtool before side columns (2026-12-01); this packtool reads "
               "schema 2 only: pack the data again with this packtool")


@dataclass(frozen=True)
class ShardInfo:
    file: str
    rows: int
    tokens: int  # physical tokens
    loss_tokens: int
    bytes: int
    xxh3_128: str  # checksum.SHARD_CHECKSUM, the manifest's key
    # the largest token id in the shard, pads too (FORMAT.md): a trainer refuses a vocabulary at or
    # below it before it starts; None only for an entry of an output written before the field
    max_token_id: int | None = None


def _shard_entry(s: ShardInfo) -> dict:
    e = asdict(s)
    if e["max_token_id"] is None:  # the field is absent, not null: null is refused as a damaged entry
        del e["max_token_id"]
    return e


def alignment_dict(a: Alignment) -> dict:
    return config_dict(a, PackingConfig())["alignment"]


def build_manifest(plan: Plan, shards: list[ShardInfo], stats: dict, tokenizer: dict,
                   input_info: dict, side=()) -> dict:
    """Everything a reader needs to check and consume the slabs; no timings, so the same
    input and config give a byte-identical manifest."""
    return {
        "side_columns": side_columns_to_manifest(side),
        "format": FORMAT_NAME,
        "schema_version": SCHEMA_VERSION,
        "packtool_version": __version__,
        "config": config_dict(plan.alignment, plan.packing),
        "tokenizer": tokenizer,
        "input": input_info,
        "stats": stats,
        "shards": [_shard_entry(s) if isinstance(s, ShardInfo) else s for s in shards],
    }


def write_manifest(directory: str, manifest: dict) -> str:
    from packtool.output.files import write_file
    path = os.path.join(directory, MANIFEST)
    with write_file(path, "output", replace=True, text=True, manifest=True) as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    legacy = os.path.join(directory, LEGACY_MANIFEST)
    if os.path.isfile(legacy):  # one manifest per folder; the old name would be read as data
        os.remove(legacy)
    return path


def read_manifest(directory: str, argument: str | None = None, replacing: bool = False) -> dict:
    """The manifest as written, after the checks every reader needs: it exists, parses, and
    names this format and version. A typo or a shard file is said as such: "re-run pack"
    would mislead there. `directory` may be an object-store prefix URI (s3://...); a store
    that cannot be reached is said naming `argument`, the caller's parameter that gave it
    (`directory=`, `path=`; its flag on the command line), as the CLI names its flag."""
    if is_uri(directory):
        return _read_store_manifest(directory, argument)
    if not os.path.isdir(directory):
        from packtool.slabs.file_given import file_given
        raise NotAnOutputError(file_given(directory) if os.path.exists(directory) else
                          f"{directory}: no such folder (not a packtool output); give the folder "
                          f"a pack wrote (pack's output=, `packtool pack -o`)")
    path = manifest_file(directory)
    if path is None:
        _refuse_manifest_kind(directory)
        raise FormatError(f"{directory}: no {MANIFEST} (not a packtool output, or an interrupted "
                          f"pack: re-run `packtool pack`)")
    from packtool.slabs.open_rules import linked_shard
    link = linked_shard(directory, os.path.basename(path), "manifest")
    if link is not None and link.refused:  # the shards' rule: no file of the output read from elsewhere
        raise FormatError(f"{path}: {link.refused}")
    from packtool.storage import read_small
    try:
        data = read_small(path, MANIFEST_BYTES, "packtool manifest", "re-run `packtool pack`", err=FormatError)
    except OSError as e:
        raise FormatError(f"{path}: cannot be read as JSON ({e}); re-run `packtool pack`") from None
    return parse_manifest(data, path, replacing)


def _refuse_manifest_kind(directory: str) -> None:
    """A manifest name there that is no regular file (manifest_file takes only those) is said by
    what it is, not "no manifest"; never opened (a FIFO with no writer blocks). A symbolic link to
    nothing under either name in the links rule's words (slabs.open_rules.linked_shard, as a
    shard's: "a dangling link", where it points); the current name as anything else (a FIFO, a
    device, a folder, also behind a link) by its kind (output.paths, as inputs are); the older
    name as a link to what is no regular file in the links rule's words. The older plain name as
    a FIFO or folder itself is not said: data folders hold entries of that name of their own
    (manifest_name.packtool_made)."""
    from packtool.slabs.open_rules import linked_shard

    def refuse_link(name: str) -> None:
        link = linked_shard(directory, name, "manifest")
        if link is not None and link.refused:
            raise FormatError(f"{os.path.join(directory, name)}: is {link.refused}")
    for name in (MANIFEST, LEGACY_MANIFEST):  # a link to nothing: "a dangling link", where it points
        if not os.path.exists(os.path.join(directory, name)):
            refuse_link(name)
    there = os.path.join(directory, MANIFEST)
    if os.path.lexists(there):  # a FIFO, a device, a folder, also behind a link: by its kind
        from packtool.output.paths import describe_kind
        raise FormatError(f"{there}: is {describe_kind(there)}, not a regular file; a manifest is the file "
                          f"`packtool pack` writes: re-run `packtool pack`")
    refuse_link(LEGACY_MANIFEST)


def store_manifest_bytes(loc) -> bytes:
    """An object's bytes, up to the manifest bound: an object has no stat here worth a round
    trip, so the read itself stops one byte past the bound."""
    from packtool.storage import read_small
    return read_small(loc, MANIFEST_BYTES, "packtool manifest", "re-run `packtool pack`", err=FormatError)


def _read_store_manifest(directory: str, argument: str | None) -> dict:
    loc = locate(directory, name=argument)  # the manifest is each reader's first request of the store
    for name in (MANIFEST, LEGACY_MANIFEST):
        try:
            return parse_manifest(store_manifest_bytes(loc.join(name)), loc.join(name).shown)
        except FileNotFoundError:
            continue
    if (gone := bucket_gone(directory, later=False, name=argument)) is not None:
        raise gone  # not "not a packtool output": there is no bucket to hold one
    if loc.is_file():
        raise NotAnOutputError(f"{loc.shown}: an object, not a packtool output prefix; give the prefix that holds it")
    raise FormatError(f"{loc.shown}: no {MANIFEST} (not a packtool output, or a pack that has not "
                      f"committed: re-run `packtool pack`)")


def parse_manifest(data: bytes, path: str, replacing: bool = False) -> dict:
    """A manifest's bytes, checked: JSON, this format and version, the field types. `replacing`:
    a writer's read of the output it may replace, where a version 1 output (no reader reads it) is
    packtool's all the same, its shards held to their records (RB-2: else nothing could replace it)."""
    from packtool.json_text import loads
    try:
        m = loads(data)  # a hand-edited key given twice is refused, not read as its last value
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: cannot be read as JSON ({e}); re-run `packtool pack`") from None
    except RecursionError:  # e.g. 100,000 nested brackets: no manifest nests more than a few levels
        raise FormatError(f"{path}: nested too deeply to be a manifest; the manifest is edited or damaged: "
                          f"re-run `packtool pack`") from None
    old = isinstance(m, dict) and m.get("format") == FORMAT_NAME and type(m.get("schema_version")) is int \
        and m["schema_version"] == 1
    if old and not replacing:
        raise FormatError(f"{path}: {OLD_VERSION}")
    if not isinstance(m, dict) or m.get("format") != FORMAT_NAME or not (
            old or (type(m.get("schema_version")) is int and m["schema_version"] in READ_VERSIONS)):
        fmt, ver = (m.get("format"), m.get("schema_version")) if isinstance(m, dict) else (None, None)
        raise FormatError(f"{path}: format {fmt!r} schema_version {ver!r}; this packtool reads "
                          f"{FORMAT_NAME!r} schema {' or '.join(map(str, READ_VERSIONS))}")
    try:
        check_fields(m, shards_only=old)
    except FieldError as e:
        raise FormatError(f"{path}: {e}; the manifest is edited or damaged: re-run `packtool pack`") from None
    if old:  # a writer's proof of what is packtool's to replace: the shards' names, sizes and checksums
        return m
    try:
        side = side_columns_from_manifest(m.get("side_columns"), path)
        check_side_counts(m["stats"], {c.name for c in side if not c.is_int})
    except PacktoolFormatError as e:
        raise FormatError(str(e)) from None
    except FieldError as e:
        raise FormatError(f"{path}: {e}; the manifest is edited or damaged: re-run `packtool pack`") from None
    check_numbers(m, path, FormatError)
    return m


def manifest_config(m: dict, where: str = MANIFEST) -> tuple[Alignment, PackingConfig]:
    """The alignment and packing config a manifest records, with the format's one set of
    defaults; the derived multiples must agree with what this packtool computes."""
    cfg = m.get("config")
    try:
        align, packing = config_from_dict(cfg)
        a = cfg["alignment"]
    except (KeyError, TypeError, AlignmentError, PlanError, ValueError) as e:
        raise FormatError(f"{where}: config cannot be read ({type(e).__name__}: {e}); "
                          f"the manifest is edited or damaged: re-run `packtool pack`") from None
    for k in ("s", "t", "usable"):
        if a.get(k) != getattr(align, k):
            raise FormatError(f"{where}: config.alignment.{k} is {a.get(k)!r} but {align.describe()} "
                              f"C={align.capacity} gives {getattr(align, k)}: the manifest was edited")
    return align, packing


def shard_names(m: dict, where: str = MANIFEST) -> list[str]:
    """The shard file names, each a plain name inside the output folder: a manifest never
    makes a reader open a file elsewhere."""
    try:
        names = [s["file"] for s in m["shards"]]
    except (KeyError, TypeError) as e:
        raise FormatError(f"{where}: shards cannot be read ({type(e).__name__}: {e}); "
                          f"re-run `packtool pack`") from None
    for n in names:
        if not isinstance(n, str) or not n or n in (".", "..") or os.path.basename(n) != n or "\\" in n:
            raise FormatError(f"{where}: shard name {n!r} is not a plain file name in the output "
                              f"folder; the manifest is edited or damaged")
        if not is_output_shard_name(n):  # a plain reader or glob would not see it: two readings of one output
            raise FormatError(f"{where}: shard name {n!r} is not a shard name packtool writes ({SHARD_FORMS}): "
                              f"plain Parquet readers and the *.parquet globs FORMAT.md documents would miss "
                              f"it; the manifest is edited or damaged: rename the file back or re-run "
                              f"`packtool pack`")
    return names


@dataclass(frozen=True)
class SlabManifest:
    """A packed output's manifest, validated: what a reader of the slabs needs."""

    path: str
    manifest: str  # the manifest file read (MANIFEST, or LEGACY_MANIFEST in older outputs)
    alignment: Alignment
    packing: PackingConfig
    pad_id: int
    vocab_size: int
    shards: list[str]
    raw: dict
    side_columns: tuple[SideColumn, ...] = ()  # FORMAT.md "Side columns"; () for none
    # the caller's argument that gave a store URI (None locally): its later requests name it too
    argument: str | None = None
    # the local folder and manifest as they were before the manifest was read (output.unchanged):
    # a shard that fails to open or read after a `pack --overwrite` replaced them is the swap
    state: tuple | None = None

    @property
    def dp(self) -> int:
        return self.packing.dp

    def shard_max_id(self, i: int) -> int | None:
        """Shard `i`'s recorded largest token id (range-checked at read), None in an output written
        before the field: every reader holds the shard's ids to it (check_group)."""
        return self.raw["shards"][i].get("max_token_id")

    @property
    def max_token_id(self) -> int | None:
        """The output's largest token id, None where a shard records none (an older output)."""
        tops = [self.shard_max_id(i) for i in range(len(self.shards))]
        return None if not tops or None in tops else max(tops)

    def shard_path(self, i: int) -> str:
        return join(self.path, self.shards[i])

    def open_shard(self, i: int):
        """The shard as pyarrow.parquet takes it (a path, or an Arrow file for a URI)."""
        return open_file(self.shard_path(i))

    @classmethod
    def read(cls, path: str, argument: str = "path") -> "SlabManifest":
        """`argument`: the caller's parameter that gave `path` (`directory` for inspect,
        `data_dir` for train), named by a refusal of it."""
        from packtool.params import path as checked_path
        path = checked_path(argument, path, optional=False)  # None, bytes: one line, not os.stat's TypeError
        from packtool.output.unchanged import folder_state
        state = None if is_uri(path) else folder_state(path)  # a store's: check_said.fix_of, on a failure
        m = read_manifest(path, argument)
        with reading(path, argument):  # its requests after the manifest's name `argument` too
            where = manifest_file(path) or join(path, MANIFEST)
        align, packing = manifest_config(m, where)
        from packtool.slabs.declared import declared_breaks
        for what, _, _ in declared_breaks(m, packing.overflow):  # verify's manifest_declared: the first
            raise FormatError(f"{where}: {what}: the manifest was edited; run `packtool verify {path}` for every "
                              f"problem, re-run `packtool pack`")
        tok = m.get("tokenizer") if isinstance(m.get("tokenizer"), dict) else {}
        try:
            pad_id, vocab = int(tok.get("pad_id") or 0), int(tok.get("vocab_size") or 0)
        except (TypeError, ValueError):
            raise FormatError(f"{where}: tokenizer.pad_id/vocab_size are not integers; "
                              f"re-run `packtool pack`") from None
        return cls(path=path, manifest=where, alignment=align, packing=packing, pad_id=pad_id, vocab_size=vocab,
                   shards=shard_names(m, where), raw=m,
                   side_columns=side_columns_from_manifest(m.get("side_columns"), where),  # checked by read_manifest
                   argument=argument if is_uri(path) else None, state=state)

    @contextmanager
    def reading(self):
        """The block in which this output's shards are read: a store that stops answering (or
        loses its bucket) meanwhile is one line naming the argument that gave it; any error in
        a local folder replaced since its manifest was read is the replacement, said so (S45B-3:
        "listed but missing ... re-run `packtool pack`" of a healthy new output)."""
        from packtool.output.unchanged import check_unchanged
        try:
            with reading(self.path, self.argument):
                yield
        except Exception:
            check_unchanged(self.path, self.state, None)
            raise

    @property
    def schema(self) -> pa.Schema:
        return slab_schema(self.side_columns)

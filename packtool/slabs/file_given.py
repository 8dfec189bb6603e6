"""What to say when a file is given where a packed output folder is read (every reader asks
`read_manifest`): "give the folder that holds it" is the fix for a shard or a manifest only.
A plan file or a lengths file (the two other inputs `packtool inspect` takes, S40-9) was told
to give its folder, which is no output: each is named as what it is, with the flag that reads
it. Known by name and a cheap look (a Parquet footer's schema), never by reading rows."""
from __future__ import annotations

import os

from packtool.manifest_name import LEGACY_MANIFEST, MANIFEST
from packtool.planning.lengths import LENGTH_COLUMNS
from packtool.planning.plan_file import META_KEY
from packtool.slabs.names import is_shard_name

NOT_FOLDER = "a file, not a packtool output folder"
# what `packtool plan --output` writes besides its metadata (an older plan file records none)
_PLAN_COLUMNS = {"slab", "source_index", "chunk_index", "length", "padded", "start"}
_LENGTHS_SUFFIXES = (".npy", ".txt")  # the lengths kinds no source or output file has


def file_given(path: str) -> str:
    """The one line for `path`, an existing file (or other non-folder) given as an output folder."""
    name = os.path.basename(path)
    if is_shard_name(name) or name in (MANIFEST, LEGACY_MANIFEST):
        return f"{path}: {NOT_FOLDER}; give the folder that holds it ({os.path.dirname(path) or '.'})"
    names, meta = _parquet_schema(path)
    if META_KEY in meta or _PLAN_COLUMNS <= names:
        return (f"{path}: {NOT_FOLDER}: a plan file (`packtool plan --output`); inspect it with "
                f"`packtool inspect --plan {path}`, or give the folder `packtool pack -o` wrote")
    if name.lower().endswith(_LENGTHS_SUFFIXES) or (names & set(LENGTH_COLUMNS) and "input_ids" not in names):
        return (f"{path}: {NOT_FOLDER}; for lengths before packing: `packtool inspect --lengths {path}`; "
                f"a packed output is the folder `packtool pack -o` wrote")
    return (f"{path}: {NOT_FOLDER}; give the folder `packtool pack -o` wrote (a plan file: `packtool inspect "
            f"--plan FILE`; lengths: `packtool inspect --lengths FILE`)")


def _parquet_schema(path: str) -> tuple[set, dict]:
    """The column names and metadata of a Parquet file; nothing for any other file."""
    if not os.path.isfile(path):  # a FIFO or a device: opening it could block or consume it
        return set(), {}
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"PAR1":
                return set(), {}
        import pyarrow.parquet as pq
        from packtool.storage import arrow_file  # a name that is not UTF-8 through Python's open (S44-4)
        schema = pq.read_schema(arrow_file(path))
    except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError: a damaged file is no plan
        return set(), {}
    return set(schema.names), dict(schema.metadata or {})

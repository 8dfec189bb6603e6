"""What a file met among an input's files is to packtool, by its name: a data file of a kind it
reads (`kind_of`: parquet, jsonl, json, arrow, csv), a file of a kind that holds rows packtool
does not read (`unreadable`: a compression or archive around data, a columnar or array format of
another tool, a framework's tensors or records: refused inside a folder input, a prefix or a
glob's matches, naming each, as its rows would otherwise be lost), or anything else (a README, a
.txt, a licence, a script): passed over, and named in one note (`say_passed_over`), never left
out without a word. `listed_data` is that rule, for every listing, local or on a store.
"""
from __future__ import annotations

from packtool.errors import PacktoolInputError
from packtool.notes import note
from packtool.tokenize.csv_reader import CSV_EXT
from packtool.tokenize.text_readers import JSONL_CODECS

PARQUET_EXT = (".parquet", ".pq")
_JSONL_BASES = (".jsonl", ".ndjson", ".jsonlines")  # .jsonlines: jsonlines.org's own name, pandas' and jsonlines' too
JSONL_EXT = _JSONL_BASES + tuple(base + ".gz" for base in _JSONL_BASES) + (".json.gz",) + tuple(
    base + c for base in (*_JSONL_BASES, ".json") for c in JSONL_CODECS)
ARROW_EXT = (".arrow", ".feather", ".ipc")
# kinds that hold rows packtool does not read: compressions and archives (also one around a kind
# it reads, `x.jsonl.gzip`, `x.parquet.snappy`), other tools' tables, numpy arrays, Megatron's
# indexed dataset (.bin/.idx), PyTorch / pickle / HDF5 / TFRecord / msgpack records
UNREADABLE_EXT = (".zst", ".zstd", ".bz2", ".xz", ".lz4", ".lzma", ".br", ".zip", ".tar", ".tgz", ".7z", ".gz",
                  ".gzip", ".snappy", ".orc", ".avro", ".xlsx", ".xls", ".npy", ".npz", ".bin", ".idx", ".pt",
                  ".pth", ".pkl", ".pickle", ".h5", ".hdf5", ".tfrecord", ".tfrecords", ".msgpack")
READ_KINDS = ".parquet/.pq, .jsonl/.ndjson/.jsonlines[.gz|.zst|.bz2], .json, .arrow/.feather/.ipc, .csv/.tsv"


def kind_of(path: str) -> str | None:
    """The kind packtool reads `path` as (parquet | jsonl | json | arrow | csv), None for none."""
    low = path.lower()
    if low.endswith(PARQUET_EXT):
        return "parquet"
    if low.endswith(JSONL_EXT):
        return "jsonl"
    if low.endswith(".json"):
        return "json"
    if low.endswith(ARROW_EXT):
        return "arrow"
    if low.endswith(CSV_EXT):
        return "csv"
    return None


def unreadable(path: str) -> bool:
    """A file of rows packtool does not read: refused among a folder's files, never passed over."""
    return kind_of(path) is None and path.lower().endswith(UNREADABLE_EXT)


def listed_data(where: str, found: list[tuple[str, str]], what: str, mine: bool = False,
                quiet: bool = False) -> list[tuple[str, str]]:
    """The files packtool reads among those a listing gave (a local folder, a store prefix, a
    glob's matches, local or on a store: one rule for each, M5), in their order. `found`: (path
    its kind is judged by, name as said relative to `where`). A file of rows of a kind packtool
    does not read is refused naming it (passed over, its rows would be lost); any other file of no
    kind it reads is passed over, named in one note unless `quiet`. `mine`: a tree of packtool's
    own named itself, whose other files are its own: neither refused nor noted. `what`: how the
    listing is said ("folder holds", "glob matched")."""
    if not mine:
        bad = [name for path, name in found if unreadable(path)]
        if bad:
            more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
            raise PacktoolInputError(f"{what} data files packtool cannot read: {', '.join(bad[:3])}{more}; "
                                     f"decompress or convert them ({READ_KINDS}), or pass the readable files "
                                     f"themselves", path=where)
        if not quiet:
            say_passed_over(where, [name for path, name in found if kind_of(path) is None])
    return [(path, name) for path, name in found if kind_of(path)]


def say_passed_over(where: str, names: list[str]) -> None:
    """One note naming the files below the folder or prefix `where` that are neither read nor
    refused (`names`, as shown relative to it): a user who put rows there under another name
    learns it before training without them."""
    if not names:
        return
    names = sorted(names)
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    n = len(names)
    note(f"{where}: passed over {n} file{'s' if n != 1 else ''} of a kind packtool does not read as data: "
         f"{', '.join(names[:5])}{more} (it reads {READ_KINDS}); rename or convert a file of rows to one of "
         f"those, or pass the data files themselves to silence this note")


__all__ = ["ARROW_EXT", "JSONL_EXT", "PARQUET_EXT", "READ_KINDS", "UNREADABLE_EXT", "kind_of", "listed_data",
           "say_passed_over", "unreadable"]

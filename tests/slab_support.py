"""Helpers for the verify/inspect tests: packed outputs written by the real writer from
synthetic token rows, and surgical edits of a shard (re-signed, so that only the semantic
check under test can catch them). No tests here."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool.align import Alignment
from packtool.packing import manifest_stats as _stats  # the manifest's stats block exactly as pack writes it
from packtool.planning.core import MASK_FIGURES, PackingConfig, plan
from packtool.planning.cut_targets import cut_targets_of_store, one_token_rows
from packtool.planning.summary import plan_summary, with_cut_targets
from packtool.slabs.format import build_manifest, write_manifest
from packtool.slabs.names import MANIFEST
from packtool.slabs.schema import SCHEMA
from packtool.slabs.writer import write_shards
from packtool.tokenize.checksum import SHARD_CHECKSUM, file_digest
from packtool.tokenize.flat_tokens import FlatTokens, write_flat_store

PAD = 0
VOCAB = 1000
# a fingerprint of the form pack writes (64 hex digits): no source to compute it from
SYNTHETIC_FINGERPRINT = "5" * 64


def write_source(directory: str, lengths, seed: int = 0) -> FlatTokens:
    """A FlatTokens store of synthetic rows: ids in [3, VOCAB), no loss on a 'prompt' prefix."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, np.int64)
    off = np.concatenate(([0], np.cumsum(lengths)))
    ids = rng.integers(3, VOCAB, int(off[-1])).astype(np.int32)
    pos = np.arange(int(off[-1])) - np.repeat(off[:-1], lengths)
    mask = (pos >= np.repeat(lengths // 3, lengths)).astype(np.uint8)
    return write_flat_store(directory, ids, mask, off)


def write_pack(root: str, lengths, align: Alignment, packing: PackingConfig | None = None,
               shard_tokens: int = 1 << 10, group_tokens: int = 256, seed: int = 0):
    """(output dir, source dir) of a pack of synthetic rows through the real writer."""
    src_dir = os.path.join(root, "source")
    tokens = write_source(src_dir, lengths, seed)
    p = plan(np.asarray(lengths), align, packing or PackingConfig())
    out = os.path.join(root, "packed")
    os.makedirs(out, exist_ok=True)
    shards = write_shards(p, tokens, out, PAD, shard_tokens=shard_tokens, group_tokens=group_tokens)
    # the rows of one token (they train nothing), counted as pack counts them
    summary = replace(plan_summary(p), one_token_rows=one_token_rows(np.diff(tokens.offsets))[0])
    if p.packing.overflow in MASK_FIGURES:  # the targets the cuts took, counted as pack counts them
        summary = with_cut_targets(summary, cut_targets_of_store(tokens, align.usable,
                                                                 split=p.packing.overflow == "split"))
    stats = _stats(summary, sum(s.loss_tokens for s in shards))
    tok = {"path": "synthetic", "pad_id": PAD, "bos_id": None, "eos_id": None, "vocab_size": VOCAB,
           **dict.fromkeys(("sha256", "config_sha256", "template_sha256", "chat_template", "bos_token", "eos_token",
                            "pad_token"))}
    write_manifest(out, build_manifest(p, shards, stats, tok, {"fingerprint": SYNTHETIC_FINGERPRINT, "files": []}))
    return out, src_dir


def read_manifest(out: str) -> dict:
    with open(os.path.join(out, MANIFEST)) as f:
        return json.load(f)


def save_manifest(out: str, man: dict) -> None:
    with open(os.path.join(out, MANIFEST), "w") as f:
        json.dump(man, f, indent=2)


def edit_checksum(out: str, shard: int, alg: str) -> str:
    """Change the last digit of shard `shard`'s `alg` checksum in the manifest (sha256: as an
    output written before xxh3-128 records it); returns the edited value."""
    import hashlib
    man = read_manifest(out)
    entry = man["shards"][shard]
    if alg == "sha256":
        del entry["xxh3_128"]
        entry["sha256"] = hashlib.sha256(open(os.path.join(out, entry["file"]), "rb").read()).hexdigest()
    entry[alg] = entry[alg][:-1] + ("0" if entry[alg][-1] != "0" else "1")
    save_manifest(out, man)
    return entry[alg]


def resign(out: str, shard: str) -> None:
    """Update the manifest's bytes/checksum/rows of `shard` after an edit."""
    man = read_manifest(out)
    path = os.path.join(out, shard)
    for s in man["shards"]:
        if s["file"] == shard:
            s["bytes"] = os.path.getsize(path)
            s[SHARD_CHECKSUM] = file_digest(path, SHARD_CHECKSUM)
            s["rows"] = pq.ParquetFile(path).metadata.num_rows
            if "max_token_id" in s:  # as pack records it: the edit is in the slabs, not the manifest
                t = pq.ParquetFile(path).read()  # by index: an edit may hold a column twice (S46B-6)
                ids = t.column(t.schema.get_all_field_indices("input_ids")[0]).combine_chunks().flatten()
                import pyarrow.compute as pc
                s["max_token_id"] = max(int(pc.max(ids).as_py() or 0), 0)
    save_manifest(out, man)


def load_rows(out: str, shard: str) -> dict:
    """Shard columns as python lists of numpy arrays (small test shards only)."""
    t = pq.read_table(os.path.join(out, shard))
    cols = {}
    for name in t.column_names:
        col = t.column(name)
        if pa.types.is_list(col.type):
            cols[name] = [np.asarray(x) for x in col.to_pylist()]
        else:
            cols[name] = list(col.to_numpy())
    return cols


def save_rows(out: str, shard: str, cols: dict, sign: bool = True) -> None:
    arrays = []
    for f in SCHEMA:
        v = cols[f.name]
        if pa.types.is_list(f.type):
            arrays.append(pa.array([np.asarray(x).tolist() for x in v], f.type))
        else:
            arrays.append(pa.array(v, f.type))
    pq.write_table(pa.Table.from_arrays(arrays, schema=SCHEMA), os.path.join(out, shard), compression="zstd")
    if sign:
        resign(out, shard)


def find_row(cols: dict, pred) -> int:
    for r in range(len(cols["input_ids"])):
        if pred({k: v[r] for k, v in cols.items()}):
            return r
    raise AssertionError("no row matches; enlarge the fixture")


def resign_changes(man: dict) -> None:
    """stats.changes derived again from stats.overflow and stats.skipped_rows, as pack derives it
    (planning.summary.data_changes): a careful edit of an overflow figure, which every reader's
    manifest check (slabs/declared.py) then lets through to the checks against the slabs."""
    from dataclasses import asdict, fields

    from packtool.planning.core import OverflowStats
    from packtool.planning.summary import data_changes
    over = man["stats"]["overflow"]
    figures = {f.name: int(over.get(f.name) or 0) for f in fields(OverflowStats) if f.name != "policy"}
    stats = OverflowStats(man["config"]["packing"]["overflow"], **figures)
    one = (man["stats"].get("changes") or {}).get("sequences_one_token", 0)  # the rows' own figure, kept
    man["stats"]["changes"] = asdict(data_changes(stats, man["stats"].get("skipped_rows") or {}, one))


def format_reader_code() -> str:
    """FORMAT.md's standalone reader, as written (the first python block under its heading): the
    one extraction every test asks, through `format_reader` or `run_format_reader`."""
    import re
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with open(os.path.join(root, "FORMAT.md")) as f:
        m = re.search(r"## A standalone reader.*?```python\n(.*?)```", f.read(), re.S)
    assert m, "FORMAT.md: no ```python block under '## A standalone reader'"
    return m.group(1)


def format_reader(name: str = "format_reader"):
    """FORMAT.md's standalone reader as a module of this process (`name`: its __name__)."""
    import types
    mod = types.ModuleType(name)
    exec(compile(format_reader_code(), "FORMAT.md", "exec"), mod.__dict__)
    return mod


def run_format_reader(out: str, tmp_path, shard: str = "slabs-00000.parquet", row: int = 0, rank: int = 1,
                      check: bool = False) -> "subprocess.CompletedProcess":
    """FORMAT.md's standalone reader run as its script in a fresh process on slab `row` of `shard`
    of `out`, for CP rank `rank` (its command line: OUTPUT SHARD ROW RANK)."""
    import subprocess
    import sys
    script = tmp_path / "reader.py"
    script.write_text(format_reader_code())
    return subprocess.run([sys.executable, str(script), out, shard, str(row), str(rank)],
                          capture_output=True, text=True, check=check)

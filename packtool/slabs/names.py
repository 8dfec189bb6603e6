"""The names of a packed output's files and where they sit: the shard naming rule in both
forms (built by `shard_file` / `run_shard_file`, recognized by `is_shard_name` alone), a shard
mid-write, the manifest's name (and the older one still read), an object-store run's id and
intent, paths inside a folder or an object-store prefix, and what else a folder holds (names
plain Parquet readers skip, strays they would read, shards an object-store run has in flight).
Part of the slab format (`slabs.format`, which re-exports what FORMAT.md and DESIGN.md name
there); nothing else spells these names: `--overwrite` (output.owned), the sweeps of dead
runs' folders (output.stale) and the object-store protocol (output.store) ask here.

The manifest is `.manifest.json`, written last: its presence means the output is whole
(docs/DESIGN.md, "The slab format"). The leading dot keeps the folder a plain Parquet
dataset: Arrow's readers skip names starting with `.` or `_`, `datasets`' file resolver skips
only `.` (it would read `_manifest.json` as a shard). Outputs written before the rename carry
`manifest.json`; every reader here still takes them (`manifest_file`), nothing writes that
name again. Those two names and `manifest_file` live in `packtool.manifest_name` (the tokenize
stage, below this one, needs them to refuse a cache root inside a packed output) and are
re-exported here.
"""
from __future__ import annotations

import json
import os
import re

from packtool.errors import PacktoolInputError
from packtool.manifest_name import (  # noqa: F401  (owner: below the stages)
    _SHARD_NAME, LEGACY_MANIFEST, MANIFEST, is_shard_name, manifest_file)
from packtool.storage import Location, is_uri, locate, read_small

# an object-store run's intent (output/store.py): the shards it names are in flight, not strays
PENDING_PREFIX = ".packtool-pending-"
INTENT_BYTES = 256 << 20  # an intent lists shard names: as many as a manifest at most
# every shard name packtool writes: `slabs-NNNNN.parquet`, or with the 12-hex id of an
# object-store run writing beside an earlier output (output/store.py) `slabs-RUN-NNNNN.parquet`;
# a local folder holds the latter when it mirrors such a prefix (`aws s3 sync`)
# Matched whole (`fullmatch`): `$` would also take a name ending in a newline, which the
# documented `*.parquet` globs miss; ASCII: `\d` would take any Unicode digit, not the NNNNN written
_RUN_ID = re.compile(r"[0-9a-f]{12}")
SHARD_FORMS = "slabs-NNNNN.parquet or slabs-RUN-NNNNN.parquet"
_PARTIAL = ".tmp"
_INTENT = re.compile(rf"{re.escape(PENDING_PREFIX)}([0-9a-f]{{12}})\.json")
_PROOF = re.compile(rf"{re.escape(PENDING_PREFIX)}([0-9a-f]{{12}})\.(.+)\.json")
PROOF_BYTES = 4096


def shard_file(k: int, run: str | None = None) -> str:
    """The name of shard `k`: the naming rule every engine writes by; with `run` (an
    object-store run's id, `new_run_id`) the name that run gives it beside an earlier output."""
    if run is None:
        return f"slabs-{k:05d}.parquet"
    if not _RUN_ID.fullmatch(run):
        raise ValueError(f"run id {run!r} is not 12 hex digits (a packtool bug)")
    return f"slabs-{run}-{k:05d}.parquet"


def new_run_id() -> str:
    """A fresh object-store run id: the RUN of `slabs-RUN-NNNNN.parquet` and of its intent."""
    return os.urandom(6).hex()


def run_shard_file(name: str, run: str) -> str:
    """The plain shard `name` (`shard_file(k)`) under run id `run`."""
    m = _SHARD_NAME.fullmatch(name)
    if not m or m.group("run"):
        raise ValueError(f"{name!r} is not a plain shard name ({shard_file(0)}; a packtool bug)")
    return shard_file(int(m.group("k")), run)


is_output_shard_name = is_shard_name  # the name slabs.format re-exports (one rule, one function)


def partial_shard_file(path: str) -> str:
    """Where a shard is written before its rename to `path` (slabs.writer): only ever inside a
    run's temporary folder, where a killed run leaves it."""
    return path + _PARTIAL


def is_partial_shard_name(name: str) -> bool:
    """Whether `name` is a shard being written (`partial_shard_file`)."""
    return name.endswith(_PARTIAL) and is_shard_name(name[:-len(_PARTIAL)])


def is_output_file(name: str) -> bool:
    """Whether packtool writes `name` into an output folder (or a local copy of an object-store
    output): a shard, or the manifest under either name (the older one is still read and
    replaced, never written)."""
    return name in (MANIFEST, LEGACY_MANIFEST) or is_shard_name(name)


def join(directory: str, name: str) -> str:
    """`name` inside a folder or an object-store prefix URI."""
    return directory.rstrip("/") + "/" + name if is_uri(directory) else os.path.join(directory, name)


def open_file(path: str):
    """What pyarrow.parquet takes for a shard: a local path as it is, a URI as an Arrow file
    opened through packtool.storage (ranged reads; the store's standard credentials)."""
    return locate(path).open_input() if is_uri(path) else path


def is_hidden(name: str) -> bool:
    """A name every plain Parquet reader of the folder skips (Arrow: `.` and `_`)."""
    return name.startswith((".", "_"))


def stray_entries(directory: str, shards: list[str]) -> list[str]:
    """Names in `directory` that are neither a listed shard nor hidden: `pq.read_table(dir)`,
    `pyarrow.dataset` and `datasets.load_dataset("parquet", data_dir=dir)` would read them as
    data. An older output's `manifest.json` is one of them."""
    listed = set(shards)
    names = locate(directory).entries() if is_uri(directory) else os.listdir(directory)
    return sorted(n for n in names if n not in listed and not is_hidden(n))


def intent_file(run: str) -> str:
    """The name of an object-store run's intent (output/store.py): `.packtool-pending-RUN.json`."""
    if not _RUN_ID.fullmatch(run):
        raise ValueError(f"run id {run!r} is not 12 hex digits (a packtool bug)")
    return f"{PENDING_PREFIX}{run}.json"


def parse_intent(name: str, data: bytes) -> dict | None:
    """The record of an intent packtool wrote ({"new": [...], "old": [...], "proofs": {...}}),
    or None when `name` and `data` are not one: a prefix name alone proves nothing, and a run
    deletes what an intent names, so it must name only shards (its "new" ones plain or its own
    run's). "proofs" (absent in older intents: read as none) maps a named shard to the size and
    checksum that make an object at that name the run's own (output.owned.shard_is_ours)."""
    m = _INTENT.fullmatch(name)
    try:
        rec = json.loads(data)
    except ValueError:
        return None
    if not m or not isinstance(rec, dict) or set(rec) - {"proofs"} != {"new", "old"}:
        return None
    new, old, proofs = rec["new"], rec["old"], rec.get("proofs", {})
    if not (isinstance(new, list) and isinstance(old, list)
            and all(isinstance(x, str) and is_shard_name(x) for x in new + old)):
        return None
    if not (isinstance(proofs, dict) and set(proofs) <= set(new + old) and all(map(_is_proof, proofs.values()))):
        return None
    runs = {_SHARD_NAME.fullmatch(x).group("run") for x in new}
    return {"new": new, "old": old, "proofs": proofs} if runs <= {None, m.group(1)} else None


def _is_proof(p) -> bool:
    """A shard's size and one checksum, as a manifest entry records them."""
    return (isinstance(p, dict) and len(p) == 2 and type(p.get("bytes")) is int and p["bytes"] >= 0
            and all(isinstance(v, str) for k, v in p.items() if k != "bytes"))


def proof_file(run: str, shard: str) -> str:
    """Where a write task that uploads a shard of object-store run `run` (output/store.py,
    `upload_proven`) puts that shard's size and checksum before the upload, beside the run's
    intent: `.packtool-pending-RUN.SHARD.json`."""
    if not _RUN_ID.fullmatch(run) or not is_shard_name(shard):
        raise ValueError(f"no proof name for run {run!r}, shard {shard!r} (a packtool bug)")
    return f"{PENDING_PREFIX}{run}.{shard}.json"


def proof_target(name: str) -> tuple[str, str] | None:
    """(run, shard) a `proof_file` name stands for, else None."""
    m = _PROOF.fullmatch(name)
    return (m.group(1), m.group(2)) if m and is_shard_name(m.group(2)) else None


def intent_run(name: str) -> str:
    """The run id of an intent's name (one `parse_intent` took)."""
    return _INTENT.fullmatch(name).group(1)


def parse_proof(data: bytes) -> dict | None:
    """A proof's record ({"bytes": N, CHECKSUM: "..."}), or None when `data` is not one."""
    try:
        rec = json.loads(data)
    except ValueError:
        return None
    return rec if _is_proof(rec) else None


def read_intents(where: "str | Location") -> dict[str, dict[str, list[str]] | None]:
    """Every intent-like name at an object-store prefix (a URI or its Location) -> its record
    (`parse_intent`: None for one packtool did not write); empty for a local folder. A shard's
    proof (`proof_file`) is not an intent: the caller judges it by its run's intent."""
    if not isinstance(where, Location) and not is_uri(where):
        return {}
    loc, out = where if isinstance(where, Location) else locate(where), {}
    for n in loc.names():
        if n.startswith(PENDING_PREFIX) and proof_target(n) is None:
            try:
                out[n] = parse_intent(n, read_small(loc.join(n), INTENT_BYTES, "packtool intent", "remove it"))
            except FileNotFoundError:
                continue  # its run just finished
            except PacktoolInputError:  # past the bound: not one packtool wrote
                out[n] = None
    return out


def in_flight(directory: str) -> set[str]:
    """Shards an object-store pack has named in its intent (FORMAT.md, "Object storage"): the
    new ones of a run before its commit, the replaced ones it deletes after it, or a dead
    run's that the next run deletes. Not in the manifest, so never read; not damage."""
    return {x for rec in read_intents(directory).values() if rec for x in rec["new"] + rec["old"]}

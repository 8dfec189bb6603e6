"""What a killed object-store run leaves, and the proof the next run needs before it deletes
any of it (output.store's steps 2 and 5; FORMAT.md, "Object storage").

A run's intent names the shards it writes ("new") and the previous manifest's it replaces
("old"); what proves an object at a named name is the run's own is the folders' rule
(owned.shard_is_ours: name, plain object, size and checksum), so the intent carries each
size and checksum known when it is put (the replaced shards' records, the local engine's
staged shards), and a write task that learns its shard's only when it has written it (the Ray
engine's) puts them beside the intent before it uploads (`proof_file`). A named object
without a matching proof (a user's object put at the name after the kill) is kept, and said.
"""
from __future__ import annotations

from packtool.errors import PacktoolInputError
from packtool.notes import note
from packtool.output.owned import shard_is_ours
from packtool.slabs.names import PROOF_BYTES, intent_run, parse_proof, proof_target, read_intents
from packtool.storage import Location, read_small


def pending(loc: Location) -> dict[str, dict]:
    """The intents packtool wrote at the prefix (slabs.names.parse_intent); an object that
    only looks like one is not packtool's: never acted on, and it makes the prefix foreign."""
    return {n: rec for n, rec in read_intents(loc).items() if rec is not None}


def proofs_of(names, intents: dict[str, dict]) -> dict[str, tuple[str, str]]:
    """Proof objects among `names` that belong to a live or dead run's intent in `intents`
    (by run id, naming one of its new shards): name -> (intent name, shard). Any other
    proof-like object is not packtool's."""
    runs = {intent_run(n): (n, rec) for n, rec in intents.items()}
    out = {}
    for n in names:
        target = proof_target(n)
        if target and target[0] in runs and target[1] in runs[target[0]][1]["new"]:
            out[n] = (runs[target[0]][0], target[1])
    return out


def shard_proof(shard) -> dict:
    """What proves an object is this shard (a ShardInfo or a manifest entry): its size and its
    checksum under the key its manifest entry uses; {} when the record has neither."""
    from dataclasses import asdict, is_dataclass

    from packtool.tokenize.checksum import CHECKSUMS
    rec = asdict(shard) if is_dataclass(shard) else shard
    alg = next((a for a in CHECKSUMS if isinstance(rec.get(a), str)), None)
    size = rec.get("bytes")
    return {"bytes": size, alg: rec[alg]} if alg and type(size) is int and size >= 0 else {}


def clean_dead_runs(loc: Location, keep: set[str], uri: str) -> int:
    """With the lease held, every intent is a dead run's: delete what it names that the
    current manifest does not list (`keep`) and that its proof shows is still what the run
    wrote, then its proofs, then the intent. `uri`: the prefix as given (its query reaches the
    store). Returns how many shards went."""
    names = loc.names()
    intents = pending(loc)
    proofs = proofs_of(names, intents)
    present, n, kept = set(names), 0, []
    for pname, rec in intents.items():
        known = dict(rec["proofs"])
        for proof_name, (owner, shard) in proofs.items():
            if owner == pname and shard not in known:
                known[shard] = _read_proof(loc.join(proof_name))
        for name in [*rec["new"], *rec["old"]]:
            if name in keep or name not in present:
                continue
            if known.get(name) and shard_is_ours(uri, name, known[name]):
                n += bool(loc.join(name).delete())
            else:
                kept.append(name)
        for proof_name in [p for p, (owner, _) in proofs.items() if owner == pname]:
            loc.join(proof_name).delete()
        loc.join(pname).delete()
    if n:
        note(f"removed {n} object(s) a killed packtool run left at {loc.shown}")
    if kept:
        more = f" and {len(kept) - 3} more" if len(kept) > 3 else ""
        note(f"kept {', '.join(kept[:3])}{more} at {loc.shown}: a killed packtool run named it, but it is not "
             f"the size and checksum that run recorded for it (or the run was killed before it recorded "
             f"them), so not packtool's to delete; remove it if it is not yours")
    return n


def _read_proof(at: Location) -> dict | None:
    try:
        return parse_proof(read_small(at, PROOF_BYTES, "packtool shard proof", "remove it"))
    except (FileNotFoundError, PacktoolInputError):  # gone, or past the bound: no proof
        return None


__all__ = ["clean_dead_runs", "pending", "proofs_of", "shard_proof"]

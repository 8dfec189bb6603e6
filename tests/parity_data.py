"""The packed data of a parity run (`parity_harness.py`; test and bench harness, not part of
the package): the same input rows packed for one rank and for each layout's alignment,
every output checked by `verify` before it is used.

`pack` and `verify` are imported lazily, in `_stage_api` alone: the stage modules that own
them may move again, and this is the one place to follow them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packtool.align import Alignment

if TYPE_CHECKING:
    from parity_harness import Layout


def _stage_api():
    """pack, verify and their configs, imported lazily here and only here: those modules
    are moving into stage folders, and this is the one line to follow them."""
    from packtool.packing import pack
    from packtool.planning import PackingConfig
    from packtool.tokenize import TokenizeConfig
    from packtool.verification import verify
    return pack, verify, TokenizeConfig, PackingConfig


def take_rows(spec: str, out_dir: str) -> str:
    """`PATH` as is, or `PATH@A:B` / `PATH@I`: rows A..B-1 / row I of a JSON array or
    JSONL(.gz) file, written to `out_dir` as JSONL (the same records, in file order)."""
    path, _, sel = spec.partition("@")
    if not sel:
        return path
    import gzip
    import json
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        if path.endswith((".json", ".json.gz")):
            rows = [json.dumps(r) for r in json.load(f)]
        else:
            rows = [line.rstrip("\n") for line in f if line.strip()]
    a, colon, b = sel.partition(":")
    picked = rows[int(a or 0):int(b) if b else None] if colon else [rows[int(a)]]
    if not picked:
        raise ValueError(f"{spec}: selects no rows (the file has {len(rows)})")
    base = os.path.basename(path).split(".")[0]
    out = os.path.join(out_dir, f"{base}@{sel.replace(':', '-')}.jsonl")
    os.makedirs(out_dir, exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(picked) + "\n")
    return out


@dataclass(frozen=True)
class SlabSet:
    path: str
    alignment: Alignment
    slabs: int
    real_tokens: int
    loss_tokens: int


def pack_for(inputs: list[str], tokenize: dict, alignment: Alignment, out: str,
             cache_dir: str | None = None) -> SlabSet:
    """Pack `inputs` (`tokenize`: TokenizeConfig fields) for `alignment` (overflow=error:
    every sequence whole, so every layout holds the same sequences); refuse the output
    unless `verify` passes."""
    pack, verify, TokenizeConfig, PackingConfig = _stage_api()
    pack(list(inputs), alignment, PackingConfig(overflow="error"),
         TokenizeConfig(**tokenize), output=out, overwrite=True, cache_dir=cache_dir,
         workers=1)
    rep = verify(out, workers=1)
    if not rep.ok:
        first = rep.problems[0].to_dict() if rep.problems else rep.counts
        raise RuntimeError(f"{out}: verify failed for {alignment.describe()}: {first}")
    return SlabSet(out, alignment, rep.slabs, rep.real_tokens, rep.loss_tokens)


def pack_layouts(inputs: list[str], tokenize: dict, workdir: str, layouts: list[Layout],
                 capacity: int) -> dict[str, SlabSet]:
    """Slabs for 'ref' (one rank) and each layout; layouts with the same alignment (DP
    changes none) share one directory."""
    cache = os.path.join(workdir, "cache")
    by_align: dict[Alignment, SlabSet] = {}
    out = {}
    for name, align in [("ref", Alignment(capacity=capacity))] + [
            (lay.name, lay.alignment(capacity)) for lay in layouts]:
        if align not in by_align:
            tag = f"tp{align.tp}-cp{align.cp}-sp{int(align.sp)}"
            by_align[align] = pack_for(inputs, tokenize, align,
                                       os.path.join(workdir, f"slabs-{tag}"), cache)
        out[name] = by_align[align]
    return out

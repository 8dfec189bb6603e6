"""manifest.json: the last file of a packed output; its presence means the output is whole."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, is_dataclass

from .. import __version__
from ..plan import Plan
from .writer import SCHEMA_VERSION, ShardInfo

MANIFEST = "manifest.json"
FORMAT_NAME = "packtool-slabs"


def _plain(x):
    return asdict(x) if is_dataclass(x) else x


def build_manifest(plan: Plan, shards: list[ShardInfo], stats: dict, tokenizer: dict,
                   input_info: dict) -> dict:
    """Everything a reader needs to check and consume the slabs; no timings, so the same
    input and config give a byte-identical manifest."""
    a = plan.alignment
    return {
        "format": FORMAT_NAME,
        "schema_version": SCHEMA_VERSION,
        "packtool_version": __version__,
        "config": {
            "alignment": dict(tp=a.tp, cp=a.cp, sp=a.sp, fp8=a.fp8, capacity=a.capacity,
                              fixed_length=a.fixed_length, convention=a.convention,
                              s=a.s, t=a.t, usable=a.usable),
            "packing": _plain(plan.packing),
        },
        "tokenizer": tokenizer,
        "input": input_info,
        "stats": stats,
        "shards": [_plain(s) for s in shards],
    }


def write_manifest(directory: str, manifest: dict) -> str:
    path = os.path.join(directory, MANIFEST)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def read_manifest(directory: str) -> dict:
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{directory}: no {MANIFEST} (not a packtool output, or an interrupted one)")
    with open(path) as f:
        return json.load(f)

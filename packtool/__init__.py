"""packtool: alignment-aware sequence packing for Megatron THD training.

The library face: each CLI subcommand is one of these calls.

    import packtool
    a = packtool.Alignment(tp=2, cp=2, capacity=8192)
    res = packtool.pack(["data.jsonl"], a, tokenize=packtool.TokenizeConfig(tokenizer="tok.json"),
                        output="out/")
    rep = packtool.verify("out/")
    ins = packtool.inspect("out/")

Names load on first use, so `import packtool` costs no pyarrow or numba start-up.
Stages and data flow: docs/DESIGN.md.
"""
from __future__ import annotations

import importlib
import os as _os
import sys as _sys

if "pyarrow" not in _sys.modules and _sys.platform.startswith("linux"):
    # Arrow picks its default allocator once, when it loads, and every entry (the `packtool`
    # command, `python -m packtool`, the library, Ray and verify workers) imports this package
    # before any module of it imports pyarrow. jemalloc measured less CPU and peak RSS than
    # pyarrow's mimalloc with the shard-writer threads (BENCHMARKS.md, Pack end to end). An
    # explicit ARROW_DEFAULT_MEMORY_POOL wins; a caller that loaded pyarrow first keeps its pool.
    _os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")

__version__ = "0.1.0"

_EXPORTS = {
    "Alignment": "packtool.align",
    "AlignmentError": "packtool.align",
    "PacktoolError": "packtool.errors",
    "PacktoolInputError": "packtool.errors",
    "TokenizeConfig": "packtool.tokenize.config",
    "PackingConfig": "packtool.planning.core",
    "plan": "packtool.planning.core",
    "pack": "packtool.packing",
    "PackResult": "packtool.packing",
    "verify": "packtool.verification.run",
    "VerifyReport": "packtool.verification.run",
    "inspect": ("packtool.inspection.report", "inspect_packed"),
    "inspect_lengths": "packtool.inspection.report",
    "InspectReport": "packtool.inspection.report",
    "SlabManifest": "packtool.slabs.format",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'packtool' has no attribute {name!r}")
    module, attr = target if isinstance(target, tuple) else (target, name)
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))

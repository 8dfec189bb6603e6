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
import _signal  # built in, as `os` and `sys` are loaded with the interpreter: nothing to wait for
import os as _os
import sys as _sys


def _held_at_start() -> frozenset | None:
    """The `packtool` command (its console script, `python -m packtool`, `python -m packtool.cli`)
    holds Ctrl-C and SIGTERM back from here, packtool's first lines, until `packtool.cli.main`
    stands ready to end them in one line (exit 130/143): the command's own imports run before
    main does, and a signal there printed a KeyboardInterrupt traceback (SIGTERM killed the run
    without a word). Held, not ignored: main lets them land at once. What runs before this
    (the interpreter's start-up, `site`) is out of packtool's reach. A program that imports the
    library is left as it is. Returns the signals held here (None: not the command)."""
    if not hasattr(_signal, "pthread_sigmask"):
        return None
    if _sys.argv[:1] == ["-m"]:  # packtool is being imported to find the -m module: which one?
        args = _sys.orig_argv[1:]
        at = next((i for i, a in enumerate(args) if a.startswith("-m")), None)
        target = None if at is None else args[at][2:] or (args[at + 1:] or [None])[0]
        if target not in ("packtool", "packtool.cli"):
            return None
    elif _os.path.basename(getattr(_sys.modules.get("__main__"), "__file__", None) or "") != "packtool":
        return None  # (the console script runs as the __main__ module, a file named `packtool`)
    stops = {_signal.SIGINT, _signal.SIGTERM}
    return frozenset(stops - _signal.pthread_sigmask(_signal.SIG_BLOCK, stops))


_HELD = _held_at_start()

import importlib  # noqa: E402

JEMALLOC_CONF = "background_thread:true,max_background_threads:1,dirty_decay_ms:100,muzzy_decay_ms:0"

if "pyarrow" not in _sys.modules and _sys.platform.startswith("linux"):
    # Arrow picks its default allocator once, when it loads, and every entry (the `packtool`
    # command, `python -m packtool`, the library, Ray and verify workers) imports this package
    # before any module of it imports pyarrow. jemalloc measured less CPU and peak RSS than
    # pyarrow's mimalloc with the shard-writer threads (BENCHMARKS.md, Pack end to end). An
    # explicit ARROW_DEFAULT_MEMORY_POOL wins; a caller that loaded pyarrow first keeps its pool.
    _os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    # That jemalloc kept freed pages resident ("dirty") for 1 s, and past it until a thread
    # used the same arena again (release_unused() purged nothing here, pyarrow 26): a raw chat
    # pack's write peaked 11-45 MiB higher for it, more at 100k rows than at 20k (issue 23
    # class 8, BENCHMARKS.md "Raw chat pack: peak RSS"). One background thread returns every
    # arena's freed pages after 0.1 s: it keeps 0.1 s of frees, whatever the run's length.
    # Returned at once (decay 0), minor faults rose 2.2-3.2x; this way 1.1-1.5x (20k/100k
    # rows, ~1.6% of the CPU at 100k). Read by Arrow's jemalloc (prefix je_arrow_) when it
    # starts; an explicit JE_ARROW_MALLOC_CONF wins.
    _os.environ.setdefault("JE_ARROW_MALLOC_CONF", JEMALLOC_CONF)

if _sys.platform.startswith("linux"):
    # before any thread of packtool's (or the tokenizer's) starts: arenas made before stay
    from packtool.malloc_arenas import cap_arenas as _cap_arenas  # noqa: E402
    _cap_arenas()

from packtool.env import KernelsNeedHome as _KernelsNeedHome  # noqa: E402

if not any(isinstance(f, _KernelsNeedHome) for f in _sys.meta_path):  # (once, if packtool is reloaded)
    # With no home, numba would make a folder named `~` in the caller's working directory as
    # packtool's kernels load: the library refuses first, in the CLI's line (env.check_home).
    _sys.meta_path.insert(0, _KernelsNeedHome())

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
    "inspect": ("packtool.inspection.packed", "inspect_packed"),
    "inspect_lengths": "packtool.inspection.planned",
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

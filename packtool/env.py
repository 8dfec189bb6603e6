"""packtool's environment variables, read and checked in one place: a value that is not one
the variable takes is a one-line error naming the variable, never a crash at import or a
silent default (`PACKTOOL_DEBUG=false` is off, not on).

    PACKTOOL_DEBUG             on/off: tracebacks of errors (also --debug)
    PACKTOOL_TEMPLATE_SECONDS  seconds > 0 one chat-template rendering may take (default 20)
    PACKTOOL_FUSED             on/off: torch.compile'd fused ops in the trainer (default on)
    PACKTOOL_CACHE_DIR         the tokenized cache root (default ~/.cache/packtool)
    PACKTOOL_FP8_QUANT         triton/compiled: the FP8 quantizers on CUDA (default triton; compiled
                               is the torch.compile'd reference, for bench/ comparisons)
    PACKTOOL_FP8_TRANSPOSE     fused/copy: how the compiled quantizers write the transpose (default fused)
"""
from __future__ import annotations

import math
import os
import sys

from packtool.errors import PacktoolConfigError, arg

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off", "")


def env_flag(name: str, default: bool = False) -> bool:
    """An on/off variable: 1/true/yes/on or 0/false/no/off (any case); unset: `default`."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in _ON:
        return True
    if v in _OFF:
        return False
    raise PacktoolConfigError(f"environment variable {name}={raw!r} is not on or off; set it to "
                              f"1/true/yes/on or 0/false/no/off, or unset it")


_DEBUG = {"on": False}  # `--debug`, wherever on the command line it was given


def set_debug(on: bool) -> None:
    _DEBUG["on"] = bool(on)


def debug_on() -> bool:
    """Tracebacks wanted: `--debug`, or PACKTOOL_DEBUG on (a value that is not on/off is not on:
    check_environment says so)."""
    try:
        return _DEBUG["on"] or env_flag("PACKTOOL_DEBUG")
    except PacktoolConfigError:
        return False


def env_seconds(name: str, default: float) -> float:
    """A duration in seconds: a finite number > 0; unset or empty: `default`."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise PacktoolConfigError(f"environment variable {name}={raw!r} is not a number of seconds "
                                  f"> 0; set it to e.g. {default:g}, or unset it")
    return v


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """One of `choices` (any case, spaces around ignored); unset or empty: `default`."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    v = raw.strip().lower()
    if v in choices:
        return v
    raise PacktoolConfigError(f"environment variable {name}={raw!r} is not one of {', '.join(choices)}; "
                              f"set one of them, or unset it (default {default})")


FP8_QUANT = ("PACKTOOL_FP8_QUANT", ("triton", "compiled"), "triton")
FP8_TRANSPOSE = ("PACKTOOL_FP8_TRANSPOSE", ("fused", "copy"), "fused")


def env_path(name: str) -> str | None:
    """A path variable; unset or empty: None (the caller's default), as a shell's `X=` means.
    Blank (only whitespace) is refused, naming it, as RAY_ADDRESS is (engines.ray_join): read as
    unset it put the cache somewhere the user did not say, read as a path it made a folder ' '."""
    raw = os.environ.get(name)
    from packtool.params import blank, expanded  # the one rule for `~` (an empty HOME refused, naming the variable)
    if not raw:
        return None
    if blank(raw):
        raise PacktoolConfigError(f"environment variable {name}={raw!r} is blank (only whitespace), no path; "
                                  f"set it to a folder, or unset it", flag=name)
    return expanded(raw, name, PacktoolConfigError)


def no_home() -> str | None:
    """Why `~` names no folder (None: it does): HOME unset and no entry in the password
    database, where expanduser keeps `~` as it is. An empty or relative HOME is refused where
    `~` is read (params.expanded, tokenize.cache_root), naming its value."""
    if "HOME" in os.environ or os.path.expanduser("~") != "~":
        return None
    return f"HOME is not set and this user (uid {os.getuid()}) has no entry in the password database"


def _kernels_cached_in_tree() -> bool:
    """Whether numba can keep packtool's compiled kernels beside its sources (`__pycache__`);
    else it keeps them under ~/.cache/numba (unless NUMBA_CACHE_DIR says where)."""
    return os.access(os.path.dirname(os.path.abspath(__file__)), os.W_OK)


def check_home() -> None:
    """Refuse, before any work, a run whose compiled kernels would go to a folder named `~` in
    the working directory: numba's user-wide cache is `~/.cache/numba`, expanded by Python,
    which keeps `~` when there is no home (a folder `~` was made, or with a read-only working
    directory numba failed with a traceback)."""
    why = no_home()
    if why and not os.environ.get("NUMBA_CACHE_DIR") and not _kernels_cached_in_tree():
        raise PacktoolConfigError(
            f"{why}, so ~ names no folder: the compiled kernels (numba's ~/.cache/numba, since packtool's "
            f"folder is not writable) would be written to a folder named '~' here; set HOME to a folder of "
            f"yours, or NUMBA_CACHE_DIR to a folder for the kernels (and PACKTOOL_CACHE_DIR or {arg('cache_dir')} "
            f"for the tokenized cache)", flag="HOME")


class KernelsNeedHome:
    """The library's side of `check_home` (installed on sys.meta_path by packtool/__init__.py):
    numba picks the kernels' cache folder, and makes it, as each `njit(cache=True)` function is
    decorated, i.e. as packtool's modules load, and the library's names (packtool.pack, verify,
    inspect), packtool.online, packtool.hf ... load them on first use, past any one call site.
    So the check runs as packtool first loads numba, or, numba loaded already (by the caller),
    as each packtool module loads. Another program's own `import numba` is not packtool's to
    refuse. Cheap: numba loads once; a module once; HOME set, the check ends at once."""

    def find_spec(self, name, path=None, target=None):
        if name == "numba" and _importer().startswith("packtool") or (
                name.startswith("packtool.") and name not in _OWN and "numba" in sys.modules):
            check_home()
        return None  # found by the next finder, as always


_OWN = ("packtool.env", "packtool.errors")  # the check's own modules (no kernels)


def _importer() -> str:
    """The module whose code runs the import being found (importlib's own frames skipped)."""
    f = sys._getframe(2)
    while f is not None and (f.f_code.co_filename.startswith("<frozen importlib")
                             or f.f_globals.get("__name__") == "importlib"):
        f = f.f_back
    return f.f_globals.get("__name__", "") if f is not None else ""


def check_environment() -> None:
    """Check every variable packtool reads, before any work (the CLI calls it first; `check_home`
    it calls sooner, before its modules load)."""
    env_flag("PACKTOOL_DEBUG")
    env_flag("PACKTOOL_FUSED", True)
    env_seconds("PACKTOOL_TEMPLATE_SECONDS", 20.0)
    env_choice(*FP8_QUANT)
    env_choice(*FP8_TRANSPOSE)


__all__ = ["FP8_QUANT", "FP8_TRANSPOSE", "KernelsNeedHome", "check_environment", "check_home", "debug_on",
           "env_choice", "env_flag", "env_path", "env_seconds", "no_home", "set_debug"]

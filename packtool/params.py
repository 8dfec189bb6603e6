"""The library's arguments, checked at its face in one place (every public call and config
dataclass asks here): a wrong type or a value out of range is one line naming the argument
(errors.arg: the CLI's flag when the command line called) and what it takes, raised before
any work, never a raw TypeError from a stage or a value accepted that does nothing sensible.
numpy integers are integers (coerced to int, so manifests can record them); bools and floats
are not; a path is a str or os.PathLike (not bytes, not a file descriptor)."""
from __future__ import annotations

import functools
import os
import re
from typing import Any

import numpy as np

from packtool.errors import PacktoolConfigError, PacktoolError, PacktoolInputError, arg, cli_flag
from packtool.integers import INT32_MAX, INT64_MAX, int_value, short
from packtool.storage import check_form, is_uri

_LOCAL_URI = re.compile(r"(?i)(file|local)://")  # storage.uri's local schemes

MAX_DEGREE = 2**31 - 1  # tp/cp: a degree above the most a slab holds cannot split one
WORKERS_MAX = 4096  # threads or processes of one machine: more is a typo, not a machine

# argument -> (least, most, optional): the one table of integer ranges, for the library and
# for the CLI's flags that set the same arguments (the CLI calls the library, spelled as flags)
RANGES = {
    "tp": (1, MAX_DEGREE, False), "cp": (1, MAX_DEGREE, False),
    "dp": (1, INT32_MAX, False), "seed": (0, INT64_MAX, False),  # a slab's dp_rank is an int32
    "capacity": (1, INT64_MAX, False), "fixed_length": (1, INT64_MAX, True),  # align.py: slab bound
    "shard_tokens": (1, INT64_MAX, False), "workers": (1, WORKERS_MAX, True),
    "plan_shard_rows": (0, INT64_MAX, True), "max_problems": (0, INT64_MAX, False),
    "batch_rows": (1, INT32_MAX, False), "batch_size": (1, INT32_MAX, False), "num_cpus": (1, INT32_MAX, True),
    # the datasets' (packtool.hf.SlabDataset, packtool.megatron.PackedSlabDataset); a rank's upper
    # bound is its size, checked by the dataset once both are
    "rank": (0, INT32_MAX, True), "world_size": (1, INT32_MAX, False), "per_device_batch": (1, INT32_MAX, False),
    "row_group_cache": (1, INT32_MAX, False), "dp_rank": (0, INT32_MAX, False), "dp_size": (1, INT32_MAX, True),
    "cp_rank": (0, MAX_DEGREE, False), "cp_size": (1, MAX_DEGREE, True), "grad_accum": (1, INT32_MAX, False),
    "micro_batch_tokens": (1, INT64_MAX, True),
    # PackedSlabDataset.plan / steps: an epoch and global step numbers (resume), a step budget
    "epoch": (0, INT64_MAX, False), "first_step": (0, INT64_MAX, False), "start_step": (0, INT64_MAX, False),
    "max_steps": (0, INT64_MAX, True),
}
PATHS = {"directory": False, "output": True, "cache_dir": True, "source_dir": True, "path": True,
         "tokenizer": True, "chat_template": True}
SWITCHES = {"overwrite": False, "dry_run": False, "progress": False, "compare": False, "what_if": False,
            "sp": True, "add_bos": True, "add_eos": True,
            # packtool.hf: SlabCollator's switches, slab_features' keep_pads, SlabDataset.to_hf's streaming
            "keep_pads": False, "flash_kwargs": False, "seq_idx": False, "mask_4d": False, "streaming": False}
TEXTS = {"split", "config", "source_fingerprint", "prompt_field", "response_field", "text_field", "bos_token",
         "eos_token", "pad_token", "prompt_separator"}  # choices (shape, fp8, ...): their own classes
NAMES = {"side_columns", "support_columns", "source_files"}
ADDRESSES = {"ray_address"}  # None: RAY_ADDRESS if set, else a local Ray (engines.ray_join.chosen)


def count(name: str, value, error: type[PacktoolError] | None = None) -> int | None:
    """A count or size argument. An integer out of its range is `config`, as a flag's value out of
    its range is (README's `kind`; `verify --max-problems -1` was `input`, S40-7); a value of
    another kind (a bool, a float, a str) is the caller's `input`; `error`: a class of its own
    (PlanError, ...) for both."""
    least, most, optional = RANGES[name]
    if error is None:
        number = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        error = PacktoolConfigError if number or (value is None and optional) else PacktoolInputError
    return int_value(name, value, least, most, optional, error=error)


def blank(p: str) -> str | None:
    """How an empty or blank path is said ("is empty", "is blank (' ', only whitespace)"), else
    None: the one rule every path flag, argument, write path and PACKTOOL_* path variable holds.
    A blank path is no more a name than '' is: it made a folder named ' ' in the working
    directory (a cache, possibly gigabytes, that `ls` barely shows), and the messages that named
    it showed nothing (`error: : is a folder`)."""
    if p == "":
        return "is empty"
    return f"is blank ({p!r}, only whitespace)" if not p.strip() else None


def local_uri_path(p: str, name: str | None = None, error: type[PacktoolError] = PacktoolInputError) -> str:
    """The local path a `file://` or `local://` URI names (`expanded` and storage.locate ask it).
    A host part is refused: urlsplit keeps it apart from the path, so `-o local://data/out` was
    /out, not data/out, without a word (R2B-6). `file://` alone is the empty path."""
    from urllib.parse import urlsplit
    u = urlsplit(p)
    if u.netloc.lower() not in ("", "localhost"):
        raise error(f"{arg(name) + ' ' if name else ''}names host {u.netloc!r} ({u.scheme}://HOST/PATH), not a "
                    f"folder: a local path as a URI has three slashes ({u.scheme}:///{u.netloc}{u.path} for the "
                    f"absolute path), or give the path itself", path=p, flag=name and cli_flag(name))
    return u.path


def expanded(p: str, name: str | None = None, error: type[PacktoolError] = PacktoolInputError) -> str:
    """A path as every packtool entry reads it: a leading `~` is the home folder, as the shell
    would have made it (a quoted '~/x' reached packtool as is: `-o` expanded it, `verify` did
    not). The one rule for library path arguments (`path`) and the CLI's path flags (`name`).
    A `~user` of no user is refused: expanduser keeps it as is, so `-o '~nosuchuser/x'` made a
    folder named `~nosuchuser` in the working directory while `~root/x` went to /root/x.
    So is a `~` of a HOME that is empty or not absolute: expanduser made HOME='' `~/x` into
    `/x` (a folder at the file system's root) and HOME=rel `rel/x` (below the working
    directory). Every expansion of `~` in packtool goes through here.
    A `file://` or `local://` URI is the local path it names (as storage.locate reads it): spelled
    so, an output or cache root inside a folder input was taken, and a `-o file://OUT` run took
    the store door's lease where a `-o OUT` run held the local lock, so both wrote OUT."""
    if _LOCAL_URI.match(p):
        return local_uri_path(p, name, error) or p  # (`file://` alone: left for locate's refusal)
    if not p.startswith("~"):
        return p
    home = os.environ.get("HOME")
    if p[1:2] in ("", "/") and home is not None and not os.path.isabs(home):
        said = "empty" if not home.strip() else f"{home!r}, not an absolute path"
        raise error(f"{arg(name) + ' ' if name else ''}starts with ~, but HOME is {said}, so ~ names no home "
                    f"folder: set HOME to your home folder, or give the full path", path=p,
                    flag=name and cli_flag(name))
    out = os.path.expanduser(p)
    if out.startswith("~"):
        user = p[1:].split("/", 1)[0]
        whose = f"there is no user {user!r} on this machine" if user else \
            "HOME is not set and this user has no home folder"
        raise error(f"{arg(name) + ' ' if name else ''}starts with ~{user}, but {whose}: give the full path, "
                    f"or ./{p} for a name ~{user} here", path=p, flag=name and cli_flag(name))
    return out


def path(name: str, value, error: type[PacktoolError] = PacktoolInputError,
         optional: bool | None = None) -> str | None:
    """A path as str (os.fspath of a PathLike, `~` expanded); None where the argument is
    optional (PATHS, unless `optional` says)."""
    optional = PATHS[name] if optional is None else optional
    if value is None and optional:
        return None
    p = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if isinstance(p, str) and blank(p) is None:
        if is_uri(p):  # its text refused here names the argument (`output=`), as the CLI names its flag
            check_form(p, name)
        return expanded(p, name, error)
    none = " or None" if optional else ""
    if isinstance(p, str):  # '': an unset variable's value; not "not given", which is None
        raise error(f"{arg(name)} {blank(p)}; give a path{none}", flag=cli_flag(name))
    raise error(f"{arg(name)} must be a path (str or os.PathLike){none}, got {_got(value)}")


def switch(name: str, value, error: type[PacktoolError] = PacktoolInputError) -> bool | None:
    if value is None and SWITCHES[name]:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    none = ", or None for the default" if SWITCHES[name] else ""
    raise error(f"{arg(name)} must be True or False{none}, got {_got(value)}")


def text(name: str, value, error: type[PacktoolError] = PacktoolInputError) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise error(f"{arg(name)} must be a str or None, got {_got(value)}")


def address(name: str, value, error: type[PacktoolError] = PacktoolInputError) -> str | None:
    """A cluster address: an empty or blank one (`--ray-address "$HEAD"` with HEAD unset) is
    refused, as an empty path is: it is not "not given" (a local Ray), and Ray read it as an
    address of no host."""
    value = text(name, value, error)
    if value is not None and not value.strip():
        raise error(f"{arg(name)} is {'empty' if not value else f'blank ({value!r})'}; give HOST:PORT "
                    f"(or auto, ray://HOST:PORT), or leave it out", flag=cli_flag(name))
    return value


def names(name: str, value, error: type[PacktoolError] = PacktoolInputError) -> tuple[str, ...] | None:
    """Column (or file) names: a comma-separated str (each name stripped) or a list or tuple of
    str (None kept). An empty name (`"a,"`, an unset shell variable) is refused: dropping it
    would go on without the column the caller meant to keep."""
    if value is None:
        return None
    if isinstance(value, str):
        value = tuple(x.strip() for x in value.split(","))
    if isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
        if not all(x.strip() for x in value):
            raise error(f"{arg(name)} has an empty name in {_shown(value)}: give NAME[,NAME...] with none empty")
        return tuple(value)
    raise error(f"{arg(name)} must be a list of str (or one comma-separated str), got {_got(value)}")


def _shown(names: tuple) -> str:
    return repr(",".join(names))


def checked(name: str, value, error: type[PacktoolError] | None = None):
    """`value` of library argument `name`, checked and normalized by the rule its name has (with
    that rule's error class unless `error` is given)."""
    for table, rule in ((RANGES, count), (PATHS, path), (SWITCHES, switch), (TEXTS, text), (NAMES, names),
                        (ADDRESSES, address)):
        if name in table:
            return rule(name, value, error) if error else rule(name, value)
    raise KeyError(name)  # a bug: every argument checked here has a rule


def position(name: str, value, size: int, what: str, **where) -> int:
    """`value`, an index into `size` items (`what`: "slab"), as the int it stands for: an
    integer (numpy's too, anything with __index__; not a bool, whose True would be item 1, nor a
    float), negative counted from the end as Python's sequences count. A wrong kind is a
    PacktoolInputError, a position out of range a PacktoolIndexError (also an IndexError: it
    ends iteration over the sequence as Python's own does); `where`: the error's path."""
    import operator

    from packtool.errors import PacktoolIndexError
    try:
        i = None if isinstance(value, (bool, np.bool_)) else operator.index(value)
    except TypeError:
        i = None
    if i is None:
        raise PacktoolInputError(f"{name} must be an integer {what} index (numpy integers too; not a bool or "
                                 f"float), got {_got(value)}", **where)
    if not -size <= i < size:
        span = f"index 0..{size - 1} (or from -{size})" if size else "it has none to index"
        raise PacktoolIndexError(f"{what} {i} out of range: there are {size} {what}s; {span}", **where)
    return i % size


def torch_device(name: str, value, error: type[PacktoolError] = PacktoolConfigError, optional: bool = False):
    """`value` as the torch.device it names (None where `optional`), one torch can place a tensor
    on here: a wrong spelling ('bogus') or a device this machine lacks ('cuda' on a CPU-only
    torch, 'cuda:7' with two GPUs) is one line naming the argument at the call, not torch's
    RuntimeError or AssertionError at the first tensor made, steps later."""
    import torch
    if value is None and optional:
        return None
    if isinstance(value, (str, torch.device)) and value != "" or type(value) is int:  # int: cuda:N, as torch
        try:
            return _usable(torch.device(value))
        except (RuntimeError, AssertionError, TypeError, ValueError) as e:
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
            if isinstance(value, torch.device) or "device string" not in why:  # spelled right, not here
                raise error(f"{arg(name, str(value))}: torch cannot use that device here ({why[:100]}): give "
                            f"'cpu', or a device torch sees (torch.cuda.device_count() GPUs)") from None
    none = " or None" if optional else ""
    raise error(f"{arg(name)} must be a torch device ('cpu', 'cuda', 'cuda:N'; a str, torch.device or GPU "
                f"number){none}, got {_got(value)}")


@functools.lru_cache(maxsize=None)
def _usable(d):
    """`d` once a tensor has been placed on it (each device asked once: a micro-batch's calls
    ask again and again)."""
    import torch
    torch.empty(0, device=d)
    return d


def arguments(**values) -> list:
    """The values checked, in the order given: `a, b = arguments(a=a, b=b)`."""
    return [checked(k, v) for k, v in values.items()]


def check_fields(obj, *fields: str, error: type[PacktoolError] | None = None) -> None:
    """A frozen config dataclass's `fields`, checked and normalized in place (numpy ints to int,
    PathLike to str) so that what it records in a manifest is plain JSON."""
    for f in fields:
        object.__setattr__(obj, f, checked(f, getattr(obj, f), error))


def _got(value) -> str:
    return "None" if value is None else f"{type(value).__name__} {short(value)}"


# parameter type name -> how a caller builds one (the fix the message names)
_HOW = {"Alignment": "packtool.Alignment(capacity=8192, tp=..., cp=...)",
        "PackingConfig": "packtool.PackingConfig(algorithm='bfd', ...)",
        "TokenizeConfig": "packtool.TokenizeConfig(tokenizer='path/to/tokenizer.json', ...)"}


def expect(value, cls: type, func: str, param: str, optional: bool = False):
    """`value` when it is a `cls` (or None if `optional`); otherwise the one-line error."""
    if isinstance(value, cls) or (optional and value is None):
        return value
    name = cls.__name__
    how = _HOW.get(name, f"a {name}")
    if isinstance(value, str) and name == "TokenizeConfig":
        how = f"packtool.TokenizeConfig(tokenizer={value!r})"
    got = "nothing (None)" if value is None else f"{type(value).__name__} {short(value)}"
    article = "an" if name[0] in "AEIOU" else "a"
    raise PacktoolConfigError(f"{func}({param}=...) takes {article} {name}, got {got}: pass {param}={how}")


def group_coords(rank_name: str, rank: int, size_name: str, size: int | None, group, group_name: str,
                 where: str = "") -> tuple[int, int | None]:
    """(rank, size) of this process in a parallel group (DP, CP): a group given supplies both (a
    torch ProcessGroup answers rank() and size()); a rank or size given that disagrees with it is
    refused naming both. A group given alone left the rank at 0 on every process, each training
    rank 0's share (S49B-5). Without a group, both as given (size None: the caller's default)."""
    g_size, g_rank = getattr(group, "size", None), getattr(group, "rank", None)
    if group is None or not callable(g_size):
        return rank, size
    n = int(g_size())
    if size is not None and size != n:
        raise PacktoolConfigError(f"{where}{size_name}={size} but {group_name} has {n} ranks: pass {size_name}={n}, "
                                  f"or leave it out (the group's size)")
    if callable(g_rank):
        r = int(g_rank())
        if rank not in (0, r):
            raise PacktoolConfigError(f"{where}{rank_name}={rank} but this process is rank {r} of {group_name}: pass "
                                      f"{rank_name}={r}, or leave it out (the group's rank)")
        rank = r
    return rank, n


def process_coords(axis: str, rank: int, size: int | None, group, where: str = "") -> tuple[int, int | None, Any]:
    """(rank, size, group) of this process on `axis` ("dp", "cp"): a group not given is the one
    megatron's parallel_state runs for it (more than one rank) when what was given agrees with it
    (size left out or equal, rank left at 0 or equal); then `group_coords`. Given in part (rank and
    size without the group: megatron hands them out by two calls) the group was None, and the DP sum
    of the loss tokens was each rank's own count, with no word (RB-11)."""
    if group is None:
        r, n, g = _parallel_state({"dp": "data", "cp": "context"}[axis])
        if g is not None and (size is None or size == n) and rank in (0, r):
            group = g
    rank, size = group_coords(f"{axis}_rank", rank, f"{axis}_size", size, group, f"{axis}_group", where)
    return rank, size, group


def _parallel_state(kind: str) -> tuple[int, int, Any]:
    """(rank, size, group) of megatron parallel_state's `kind` ("data", "context") group when one of
    more than one rank runs, else (0, 1, None)."""
    try:
        from megatron.core import parallel_state as ps
        if ps.model_parallel_is_initialized():
            size = getattr(ps, f"get_{kind}_parallel_world_size")()
            if size > 1:
                return (getattr(ps, f"get_{kind}_parallel_rank")(), size, getattr(ps, f"get_{kind}_parallel_group")())
    except (ImportError, AssertionError, RuntimeError):  # no megatron, or its state not set up: none runs
        pass
    return 0, 1, None


__all__ = ["RANGES", "WORKERS_MAX", "arguments", "check_fields", "checked", "count", "expect", "group_coords", "names",
           "path", "position", "process_coords", "switch", "text"]

"""Where packtool may write, decided before any work (packtool.output's base half, with
writes.py and lock.py; files.py is their one import point).

This module owns the path rules: the one absolute path a run acts on (`resolve`,
`resolve_folder`: `~`, `./x/./`, parent links, a folder's own link followed once), what a file
target may be (`check_new_file`: never a link, a folder or special file, an input, a name inside
a packed output, an existing file without the caller's replace flag, a missing or read-only
folder; `check_log_file` for a log a resumed run appends to), what an input may be (a regular
file or folder, `refuse_special_input`), which files a folder packtool writes into may hold
(`refuse_foreign_files`), and the name of a file's temporary (`temp_name` / `temp_target`, the
one builder and parser of `.NAME.packtool-tmp-PID-HEX`).
"""
from __future__ import annotations

import os
import re
import stat
from typing import Callable, Iterable

from packtool.errors import PacktoolError, PacktoolInputError, PacktoolOutputError, arg, cli_flag, place_error
from packtool.output.relations import input_problem, packed_problem
from packtool.params import blank, expanded
from packtool.storage import kind_name

TMP_TAG = "packtool-tmp"
SPILL_TAG = "packtool-spill"


def resolve(path: str | os.PathLike) -> str:
    """The one absolute path packtool acts on: `~` expanded, `.`, `..` and doubled slashes
    folded, links in the parent folders resolved. The final name stays as given: a link there
    is for the caller to refuse (files) or resolve (`resolve_folder`)."""
    p = os.path.abspath(expanded(os.fspath(path), error=PacktoolOutputError))
    parent, name = os.path.split(p)
    return os.path.join(os.path.realpath(parent), name) if name else p


def refused(message: str, typed: str | os.PathLike, resolved: str | None = None,
            flag: str | None = None, error=PacktoolOutputError) -> PacktoolError:
    """A refusal of the path the user typed: the line shows it as typed, and the path it resolves
    to beside it in parentheses where resolving did more than make it absolute (`~`, `..`, a link
    in a parent folder): the user finds their own words, and where they lead. --json's path is
    what was typed."""
    typed = os.fspath(typed)
    differs = resolved is not None and os.path.abspath(typed) != resolved
    e = error(message, path=f"{typed} ({resolved})" if differs else typed, flag=flag)
    e.path = typed
    return e


# what a local-only path argument names, where it is not "file"
_LOCAL_KIND = {"save": "folder", "load": "folder", "tokenizer": "file or model folder"}


def refuse_uri(path: str | os.PathLike, flag: str, reads: bool = False, error=None) -> None:
    """Reports, logs, plans and checkpoints are local files and folders (`reads`: so are
    lengths, plans, tokenizers, templates and configs read): `resolve` would make "s3://b/x" a
    local folder named s3:, and a read would say "no such file" of an object that may exist.
    On a store packtool writes only pack's --output and a --cache-dir, and reads only inputs and
    packed outputs (cli.store_flags, every flag's rule). `error`: the reader's own type (a read
    is an input error, a write an output one)."""
    from packtool.storage import is_uri
    if not is_uri(os.fspath(path)):
        return
    kind, name = _LOCAL_KIND.get(flag.lstrip("-").replace("-", "_"), "file"), arg(flag)
    fix = ("copy it to this machine and give its local path (on an object store packtool reads inputs and "
           "packed outputs only)") if reads else \
        f"give a local path (only pack's {arg('output')} and {arg('cache_dir')} write to an object store)"
    raise (error or (PacktoolInputError if reads else place_error(flag)))(
        f"{name} {'reads' if reads else 'writes'} a local {kind}; {fix}", path=os.fspath(path), flag=name)


def refuse_empty(path: str | os.PathLike, flag: str, what: str) -> None:
    """'' names no file: `resolve` would make it the working directory, and a caller that reads
    '' as "not given" writes nothing without a word (an unset shell variable: `--save "$CKPT"`).
    The CLI refuses it for every path flag first (cli.path_flags); this is every writer's."""
    said = blank(os.fspath(path)) if isinstance(os.fspath(path), str) else None
    if said:  # a blank one too: it made a folder named ' ' here, invisible in every message
        raise place_error(flag)(f"{arg(flag)} {said}; give {what}", flag=cli_flag(flag))


def resolve_folder(path: str | os.PathLike, flag: str = "output") -> str:
    """`resolve`, then a link at the final name followed once; a link to nothing is refused
    (a write would create its target somewhere else than the folder checked)."""
    refuse_empty(path, flag, "a folder")
    refuse_stdout(path, flag, "folder")
    p, flag = resolve(path), arg(flag)
    if os.path.islink(p):
        target = os.path.realpath(p)
        if not os.path.lexists(target):
            raise PacktoolOutputError(f"is a symbolic link to {target}, which does not exist; "
                                      f"give the real folder", path=str(path), flag=flag)
        return target
    return p


def nearest_existing(path: str) -> str:
    """`path` or its closest ancestor that exists (a link counts as existing): what a folder
    to be created would be made under, so what must be a writable folder."""
    p = path
    while not os.path.lexists(p):
        up = os.path.dirname(p)
        if up == p:
            break
        p = up
    return p



def describe_kind(path: str) -> str:
    """What `path` is, followed through links: "a FIFO (named pipe)", "a regular file", or
    "a symbolic link to nothing" for a dangling one."""
    try:
        st = os.stat(path)
    except OSError:
        return "a symbolic link to nothing" if os.path.islink(path) else "missing"
    return "a regular file" if stat.S_ISREG(st.st_mode) else kind_name(st.st_mode)


def is_mount_point(path: str) -> bool:
    """Whether `path` is where a file system, or a bind mount of a folder or a file, is mounted
    (a container's volume, a tmpfs): rename(2) onto or from it fails (EBUSY), so a target packtool
    puts in place by rename cannot be one. os.path.ismount misses a bind mount within one file
    system (the same st_dev), so the kernel's mount table is read where there is one."""
    if os.path.ismount(path):
        return True
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            table = f.read()
    except OSError:
        return False
    real = os.fsencode(os.path.realpath(path))  # the table escapes space, tab, newline, backslash as \ooo
    return any(len(line.split(b" ")) > 4 and _OCTAL.sub(lambda m: bytes([int(m[1], 8)]), line.split(b" ")[4]) == real
               for line in table.splitlines())


_OCTAL = re.compile(rb"\\([0-7]{3})")


def refuse_special_input(path: str, flag: str | None = None, error=None) -> None:
    """An input that is not a regular file or folder (a FIFO, socket or device, also behind a
    link) is refused by its kind: packtool reads an input more than once (its hash for the
    cache key, then its rows), and opening a FIFO with no writer blocks forever. A Git LFS
    pointer in place of the file is refused as one (storage.refuse_lfs_pointer)."""
    try:
        st = os.stat(path)
    except OSError:
        return  # missing: the caller's own "not found"
    if stat.S_ISREG(st.st_mode):  # a Git LFS pointer left in its place is said as one
        from packtool.storage import refuse_lfs_pointer
        refuse_lfs_pointer(path, error or PacktoolInputError, flag=flag and cli_flag(flag))
        return
    if stat.S_ISDIR(st.st_mode):
        return
    raise (error or PacktoolInputError)(
        f"is {kind_name(st.st_mode)}, not a regular file; packtool reads an input more than once: "
        f"save the data to a file and pass that", path=path, flag=flag and cli_flag(flag))


def check_new_file(path: str | os.PathLike, flag: str, *, replace: bool = False,
                   inputs: Iterable[str] = (), replace_flag: str = "overwrite",
                   manifest: bool = False, mine: str | None = None, in_place: bool = False) -> str:
    """Refuse, before any work, a file target packtool must not write: a link, a folder or a
    special file; one of the run's `inputs`, or a name inside one of packtool's own trees or an
    input folder (output.relations); an existing file unless `replace`; a missing or read-only
    folder. `manifest`: a file of the tree it lies in (a manifest, a cache entry's cache.json),
    checked from that tree's folder up; `mine`: the kind of tree the writer's own folder may be
    (relations.own_tree_around); `in_place`: the writer opens the file itself (a log), no rename
    puts it in place, so a mounted file is no obstacle. Returns the resolved path to write."""
    refuse_empty(path, flag, f"a file name such as {_example(flag)}")
    shown, flag = os.fspath(path), arg(flag)
    refuse_uri(shown, flag)
    refuse_stdout(shown, flag, "file")
    p = resolve(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    # a folder flag's file (train --save's mp_rank_XX.pt): its name is packtool's, not the
    # user's to change; the fix is the thing in the way, or another folder
    member = _LOCAL_KIND.get(flag.lstrip("-").replace("-", "_")) == "folder"
    fix = f"remove it, or give another {flag} folder" if member else None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise refused("is a symbolic link; packtool never writes through one: "
                      + (fix or "give the real file's path or another name"), shown, p, flag)
    if st is not None and stat.S_ISREG(st.st_mode) and not in_place and is_mount_point(p):  # a file mounted there
        raise refused("is a mount point (a file a container mounts), which the rename that puts the new file in "
                      "place cannot replace: give a file name in a folder instead", shown, p, flag)
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = f"is {kind_name(st.st_mode)}"
        raise refused(f"{what}, not a {mine or 'file'} packtool wrote: {fix}" if member
                      else f"{what}; give a file name such as {_example(flag)}", shown, p, flag)
    refuse_folder_form(shown, flag)  # a folder not there yet: its spelling says it
    for inp in inputs:
        if st is not None and inp and os.path.exists(inp) and os.path.samefile(inp, p):
            raise refused(f"is the input {inp}; write to another file", shown, p, flag)
    # every writer's one rule; a manifest (cache.json) lies in its own tree, not inside another
    # packtool's own trees nest by design (an entry built in verify --source's temporary cache),
    # so a tree's own file is held to the one rule a reader needs: no packed output around it
    problem = (packed_problem(os.path.dirname(p), kinds=("packed",)) if manifest else packed_problem(p, mine=mine)) \
        or input_problem(p, inputs, holds=False)
    if problem:
        raise refused(f"{problem}; write it beside that folder", shown, p, flag)
    if st is not None and not replace:
        raise refused(f"exists; pass {arg(replace_flag, True)} to replace it, or give another {flag}"
                      f"{' folder' if member else ''}", shown, p, flag)
    folder = os.path.dirname(p)
    if not os.path.isdir(folder):
        raise refused(f"folder {os.path.dirname(shown) or os.curdir} does not exist; create it or write elsewhere",
                      shown, p, flag)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise refused(f"cannot be written: folder {os.path.dirname(shown) or os.curdir} is read-only or not yours",
                      shown, p, flag)
    return p


def refuse_stdout(path: str | os.PathLike, flag: str, kind: str) -> None:
    """`-` is stdin for an input (cli.inputs); as a place packtool writes, a file (`kind` "file")
    or a folder ("folder": pack -o, train --save, a cache root), it made one named '-' in the
    working folder, and `pack -o -` then said "Done: -". Every writer's (check_new_file,
    resolve_folder, the cache root's check)."""
    if os.fspath(path) == "-":
        said = arg(flag)
        example = _example(flag) if kind == "file" else _FOLDERS.get(said.lstrip("-").replace("-", "_"), "out")
        raise place_error(flag)(f"names standard output, but {said} writes a {kind}; give a {kind} name such as "
                                  f"{example} (or ./- for a {kind} of that name)", path="-", flag=said)


_FOLDERS = {"output": "packed", "save": "checkpoints", "cache_dir": "cache", "PACKTOOL_CACHE_DIR": "cache"}  # refuse_stdout's examples


def refuse_folder_form(path: str, flag: str) -> None:
    """A file flag's path that ends in a separator, `/.` or `/..` names a folder (POSIX resolves
    `newdir/` only to a directory): `resolve`'s abspath would drop that ending and write a FILE
    named `newdir`, another name than the user gave. A folder flag (pack -o, train --save)
    never calls this: there the ending says what it names."""
    seps = tuple(os.sep + (os.altsep or ""))
    ending = path[-1] if path.endswith(seps) else os.path.basename(path) \
        if os.path.basename(path) in (".", "..") else None
    if ending:
        raise PacktoolOutputError(f"ends with {ending!r}, which names a folder; {flag} names a file: give a file "
                                  f"name such as {_example(flag)}", path=path, flag=flag)


def _example(flag: str) -> str:
    return {"html": "report.html", "output": "plan.parquet", "json-log": "train.jsonl", "json_log": "train.jsonl"}.get(flag.lstrip("-"), "out.bin")


def temp_name(p: str) -> str:
    """A name beside `p` for its temporary: hidden, with this process's pid (sweep_temps)."""
    folder, name = os.path.split(p)
    return os.path.join(folder, f".{name}.{TMP_TAG}-{os.getpid()}-{os.urandom(4).hex()}")


_TEMP = re.compile(rf"^\.(.+)\.{TMP_TAG}-\d+-[0-9a-f]+\Z")  # \Z: a name ending in a newline is no temporary


def temp_target(name: str) -> str | None:
    """The name a `temp_name` temporary is written for, else None (the one parser of them)."""
    m = _TEMP.match(name)
    return m.group(1) if m else None



def check_log_file(path: str | os.PathLike, flag: str, *, replace: bool = False,
                   inputs: Iterable[str] = (), ours: Callable[[str], bool] | None = None) -> bool:
    """`check_new_file`'s rules for a log, before any work, except that an existing file
    `ours(path)` recognises as a log this writer made (or an empty one) is appended to: a
    resumed run continues its log; any other existing file needs `replace`, which starts it
    anew. Returns whether the log is appended to (else truncated or created)."""
    p = resolve(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    appendable = (st is not None and stat.S_ISREG(st.st_mode)
                  and (st.st_size == 0 or (ours is not None and ours(p))))
    check_new_file(path, flag, replace=replace or appendable, inputs=inputs, in_place=True)
    return appendable


def refuse_foreign_files(folder: str, shown: str, flag: str, ours: Callable[[str], bool]) -> None:
    """A folder packtool writes files into (`train --save`) holds only what `ours(name)` says
    it writes there and packtool's own temporaries: like `pack -o`, a folder with other files
    is refused (it names them), so packtool's files never land among a user's."""
    try:
        entries = sorted(os.listdir(folder))
    except OSError as e:
        raise refused(f"cannot list it ({e.strerror})", shown, folder, arg(flag)) from None
    foreign = [e for e in entries if not (ours(e) or ours(temp_target(e) or ""))]
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise refused(f"holds other files ({', '.join(foreign[:3])}{more}); packtool writes only into a new or "
                      f"empty folder or one it wrote: pick another {arg(flag)}", shown, folder, arg(flag))



def refuse_inside_packed(path: str, flag: str, mine: str | None = None, itself: bool = False,
                         error=PacktoolOutputError) -> None:
    """A file packtool writes for the user (a report, a plan, a log, a checkpoint) never lands
    inside a packed output folder, at any depth (output.relations.packed_problem, the rule
    files.check_new_file applies to every file and check_output to --output). `itself`: `path`
    is a folder the writer fills (to_hf's datasets cache), refused as one of those trees too."""
    problem = packed_problem(resolve(path), itself=itself, mine=mine)
    if problem:  # `path` as the user typed it (the resolved one beside it: paths.refused)
        raise refused(f"{problem}; write it beside that folder", path, resolve(path), cli_flag(flag) or flag,
                      error=error)


__all__ = ["SPILL_TAG", "TMP_TAG", "check_log_file", "check_new_file", "describe_kind", "kind_name", "nearest_existing",
           "refuse_empty", "refuse_folder_form", "refuse_foreign_files", "refuse_special_input", "refuse_stdout",
           "refuse_uri", "refused", "resolve",
           "resolve_folder",
           "temp_name", "temp_target", "refuse_inside_packed"]

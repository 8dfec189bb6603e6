"""The primitives every packtool write goes through (packtool.output's base half).

A file packtool writes for a user (`plan -o`, `inspect --html`, `train --save`, a manifest,
cache.json) is written to an exclusive temporary file beside it and published by one link or
rename, so a reader sees the old file or the new one, whole. The final name is checked before
any work: a symbolic link there is refused (packtool never writes through one), an existing
file is replaced only when the caller's flag allows it, never when it is one of the run's
inputs. The lock file is created exclusively, or reopened only when it is a plain one-link
file holding a pid (what packtool writes), never truncated otherwise. A temporary carries a
record of its writer (output.leftovers), so a later run removes those of dead processes, and
only those: a user's file under a look-alike name is named, never removed.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from contextlib import contextmanager
from typing import IO, Callable, Iterable, Iterator

from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.output.leftovers import Sweep, mark_file, unmark_file
from packtool.output.relations import input_problem, packed_problem

TMP_TAG = "packtool-tmp"
SPILL_TAG = "packtool-spill"
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK}


def resolve(path: str | os.PathLike) -> str:
    """The one absolute path packtool acts on: `~` expanded, `.`, `..` and doubled slashes
    folded, links in the parent folders resolved. The final name stays as given: a link there
    is for the caller to refuse (files) or resolve (`resolve_folder`)."""
    p = os.path.abspath(os.path.expanduser(os.fspath(path)))
    parent, name = os.path.split(p)
    return os.path.join(os.path.realpath(parent), name) if name else p


def refuse_uri(path: str | os.PathLike, flag: str) -> None:
    """Reports, logs and checkpoints are local files: `resolve` would make "s3://b/x" a local
    folder named s3: (only pack -o writes to an object store)."""
    from packtool.storage import is_uri
    flag = arg(flag)
    if is_uri(os.fspath(path)):
        raise PacktoolOutputError(f"{flag} writes a local file; give a local path (only pack's {arg('output')} "
                                  f"writes to an object store)", path=os.fspath(path), flag=flag)


def resolve_folder(path: str | os.PathLike, flag: str = "output") -> str:
    """`resolve`, then a link at the final name followed once; a link to nothing is refused
    (a write would create its target somewhere else than the folder checked)."""
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


def make_temp_dir(parent: str, prefix: str, private: bool = False) -> str:
    """A new folder under a name no one could have put a link at (random, created exclusively).
    Not `private`: the umask's mode, as `mkdir` gives, since it becomes a user's output."""
    import tempfile
    d = tempfile.mkdtemp(prefix=prefix, dir=parent)
    if not private:
        share_as_mkdir(d)
    return d


def share_as_mkdir(path: str) -> None:
    """Give a folder made private (mkdtemp's 0700: nothing half-built is readable) the mode a
    plain `mkdir` gives, 0777 less the umask, as it is published: a tokenized cache entry on a
    team's shared --cache-dir is then readable by whoever the umask lets read files."""
    os.chmod(path, 0o777 & ~_umask())


def _umask() -> int:
    """The process's umask, read without setting it where Linux says it (os.umask sets it,
    for a moment, for every thread: a file another thread creates then gets that mode)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def describe_kind(path: str) -> str:
    """What `path` is, followed through links: "a FIFO (named pipe)", "a regular file", or
    "a symbolic link to nothing" for a dangling one."""
    try:
        st = os.stat(path)
    except OSError:
        return "a symbolic link to nothing" if os.path.islink(path) else "missing"
    return "a regular file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)


def refuse_special_input(path: str, flag: str | None = None, error=None) -> None:
    """An input that is not a regular file or folder (a FIFO, socket or device, also behind a
    link) is refused by its kind: packtool reads an input more than once (its hash for the
    cache key, then its rows), and opening a FIFO with no writer blocks forever."""
    try:
        st = os.stat(path)
    except OSError:
        return  # missing: the caller's own "not found"
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return
    from packtool.errors import PacktoolInputError
    raise (error or PacktoolInputError)(
        f"is {_kind(st.st_mode)}, not a regular file; packtool reads an input more than once: "
        f"save the data to a file and pass that", path=path, flag=flag and cli_flag(flag))


def check_new_file(path: str | os.PathLike, flag: str, *, replace: bool = False,
                   inputs: Iterable[str] = (), replace_flag: str = "overwrite",
                   manifest: bool = False) -> str:
    """Refuse, before any work, a file target packtool must not write: a link, a folder or a
    special file; one of the run's `inputs`, or a name inside a packed output or an input folder
    (output.relations); an existing file unless `replace`; a missing or read-only folder.
    Returns the resolved path to write."""
    shown, flag = os.fspath(path), arg(flag)
    refuse_uri(shown, flag)
    p = resolve(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise PacktoolOutputError("is a symbolic link; packtool never writes through one: give "
                                  "the real file's path or another name", path=shown, flag=flag)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise PacktoolOutputError(f"is {_kind(st.st_mode)}; give a file name such as "
                                  f"{_example(flag)}", path=shown, flag=flag)
    for inp in inputs:
        if st is not None and inp and os.path.exists(inp) and os.path.samefile(inp, p):
            raise PacktoolOutputError(f"is the input {inp}; write to another file", path=shown,
                                      flag=flag)
    # every writer's one rule; a manifest lies in its own packed output, not inside another
    problem = packed_problem(os.path.dirname(p) if manifest else p) or input_problem(p, inputs, holds=False)
    if problem:
        raise PacktoolOutputError(f"{problem}; write it beside that folder", path=shown, flag=flag)
    if st is not None and not replace:
        raise PacktoolOutputError(f"exists; pass {arg(replace_flag, True)} to replace it, or give another "
                                  f"{flag}", path=shown, flag=flag)
    folder = os.path.dirname(p)
    if not os.path.isdir(folder):
        raise PacktoolOutputError(f"folder {folder} does not exist; create it or write elsewhere",
                                  path=shown, flag=flag)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PacktoolOutputError(f"cannot be written: folder {folder} is read-only or not yours",
                                  path=shown, flag=flag)
    return p


def _example(flag: str) -> str:
    return {"html": "report.html", "output": "plan.parquet"}.get(flag.lstrip("-"), "out.bin")


def temp_name(p: str) -> str:
    """A name beside `p` for its temporary: hidden, with this process's pid (sweep_temps)."""
    folder, name = os.path.split(p)
    return os.path.join(folder, f".{name}.{TMP_TAG}-{os.getpid()}-{os.urandom(4).hex()}")


_TEMP = re.compile(rf"^\.(.+)\.{TMP_TAG}-\d+-[0-9a-f]+$")


def temp_target(name: str) -> str | None:
    """The name a `temp_name` temporary is written for, else None (the one parser of them)."""
    m = _TEMP.match(name)
    return m.group(1) if m else None


def sweep_temps(p: str) -> int:
    """Remove the temporaries of `p` that dead writers left, each only on its record's proof
    (output.leftovers.judge_file: a name is no proof); name those it leaves."""
    folder, name = os.path.split(p)
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return 0
    sweep = Sweep("file")
    for e in entries:
        if temp_target(e) == name:
            sweep.consider_file(os.path.join(folder, e))
    return sweep.report()


# A new file's mode before the umask, as open() and touch use: with umask 002 a team's group may
# write what packtool made, as it may every other file there (0o644 ignored such a umask)
NEW_FILE_MODE = 0o666


def open_exclusive(path: str, mode: int = NEW_FILE_MODE) -> int:
    """A new file, never an existing one nor through a link (O_CREAT|O_EXCL|O_NOFOLLOW)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


@contextmanager
def write_file(path: str | os.PathLike, flag: str, *, replace: bool = False,
               inputs: Iterable[str] = (), text: bool = False, checked: bool = False,
               manifest: bool = False) -> Iterator[IO]:
    """Write `path` (see `check_new_file`; `checked`: the caller already resolved and checked
    it): yields a file object on an exclusive temporary beside it, published when the block
    ends without error; on an error the temporary goes and `path` is as it was."""
    p = os.fspath(path) if checked else check_new_file(path, flag, replace=replace, inputs=inputs, manifest=manifest)
    sweep_temps(p)
    tmp = temp_name(p)
    try:
        fd = open_exclusive(tmp)
    except OSError as e:
        raise PacktoolOutputError(f"cannot be written ({e.strerror})", path=os.fspath(path),
                                  flag=arg(flag)) from None
    try:
        mark_file(fd)  # the proof a later sweep needs if this run is killed mid-write
        with os.fdopen(fd, "w" if text else "wb", encoding="utf-8" if text else None) as f:
            yield f
        unmark_file(tmp)  # published, it is the user's file, not a leftover
        publish(tmp, p, replace, os.fspath(path), flag)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def publish(tmp: str, p: str, replace: bool, shown: str, flag: str) -> None:
    """Put the finished `tmp` at `p` in one step. Without `replace` a hard link, which fails
    if anything appeared at `p` meanwhile (file systems without links: a re-check, then a
    rename); with it a rename, which replaces a link's entry, never the file it points to."""
    if replace:
        if os.path.islink(p) or (os.path.lexists(p) and not os.path.isfile(p)):
            raise PacktoolOutputError("was replaced by a link or folder while packtool wrote it; "
                                      "left as it is", path=shown, flag=arg(flag))
        os.replace(tmp, p)
        return
    try:
        os.link(tmp, p, follow_symlinks=False)
    except FileExistsError:
        raise PacktoolOutputError(f"appeared while packtool was writing it; left as it is: pass "
                                  f"{arg('overwrite', True)} or give another name", path=shown, flag=arg(flag)) from None
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        if os.path.lexists(p):
            raise PacktoolOutputError("appeared while packtool was writing it; left as it is",
                                      path=shown, flag=arg(flag)) from None
        os.rename(tmp, p)
        return
    os.unlink(tmp)


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
    check_new_file(path, flag, replace=replace or appendable, inputs=inputs)
    return appendable


def refuse_foreign_files(folder: str, shown: str, flag: str, ours: Callable[[str], bool]) -> None:
    """A folder packtool writes files into (`train --save`) holds only what `ours(name)` says
    it writes there and packtool's own temporaries: like `pack -o`, a folder with other files
    is refused (it names them), so packtool's files never land among a user's."""
    try:
        entries = sorted(os.listdir(folder))
    except OSError as e:
        raise PacktoolOutputError(f"cannot list it ({e.strerror})", path=shown, flag=arg(flag)) from None
    foreign = [e for e in entries if not (ours(e) or ours(temp_target(e) or ""))]
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise PacktoolOutputError(f"holds other files ({', '.join(foreign[:3])}{more}); packtool writes "
                                  f"only into a new or empty folder or one it wrote: pick another "
                                  f"{arg(flag)}", path=shown, flag=arg(flag))


def open_append(path: str | os.PathLike, flag: str, truncate: bool = False) -> IO:
    """A log opened for appending (`truncate`: started anew): created if missing, never
    through a link, only a regular file (a FIFO or device is refused rather than blocked on)."""
    flag = arg(flag)
    refuse_uri(path, flag)
    p = resolve(path)
    st = os.lstat(p) if os.path.lexists(p) else None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise PacktoolOutputError(f"is {_kind(st.st_mode)}; give a file name", path=os.fspath(path),
                                  flag=flag)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0), NEW_FILE_MODE)
    except OSError as e:
        why = "is a symbolic link; packtool never writes through one" if e.errno == errno.ELOOP else \
            f"cannot be written ({e.strerror})"
        raise PacktoolOutputError(why, path=os.fspath(path), flag=flag) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise PacktoolOutputError(f"is {_kind(st.st_mode)}; give a file name", path=os.fspath(path),
                                  flag=flag)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


# --- the lock file -----------------------------------------------------------------------

_PID_TEXT = re.compile(rb"^\d*\n?$")


def open_lock(path: str, shown: str, flag: str = "output") -> int:
    """The lock file at `path`, opened for flock: created exclusively, or an existing one
    reopened without following a link and only when it is what packtool writes there (a plain
    file of this user, one link, holding a pid). Anything else is refused, never truncated."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, NEW_FILE_MODE)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:  # its run ended between the two opens
        return open_lock(path, shown, flag)
    except OSError as e:
        why = "a symbolic link" if e.errno == errno.ELOOP else f"not openable ({e.strerror})"
        raise PacktoolOutputError(f"the lock file {path} is {why}; packtool never writes "
                                  f"through it: remove it or pick another {arg(flag)}", path=shown, flag=arg(flag)) from None
    st = os.fstat(fd)
    ours = (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()
            and st.st_size <= 32 and _PID_TEXT.match(os.pread(fd, 32, 0) or b""))
    if not ours:
        os.close(fd)
        raise PacktoolOutputError(f"{path} is not a packtool lock file (another file, another "
                                  f"user's, or a second name of one); packtool never writes it: "
                                  f"remove it or pick another {arg(flag)}", path=shown, flag=arg(flag))
    return fd


def unlink_if_same(path: str, fd: int) -> None:
    """Remove `path` only while it still names the open file `fd`."""
    try:
        if os.lstat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except OSError:
        pass


# --- folders ------------------------------------------------------------------------------

def make_parents(folder: str) -> list[str]:
    """`os.makedirs(folder)`, returning the folders it created (deepest last), so that a run
    that fails can remove exactly those (`remove_created`)."""
    made, p = [], folder
    while p and not os.path.lexists(p):
        made.append(p)
        up = os.path.dirname(p)
        if up == p:
            break
        p = up
    for d in reversed(made):
        try:
            os.mkdir(d)
        except FileExistsError:
            made.remove(d)
    return made


def remove_created(made: list[str]) -> None:
    """Remove folders `make_parents` created, deepest first, each only if still empty."""
    for d in sorted(made, key=len, reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass


__all__ = ["SPILL_TAG", "TMP_TAG", "check_log_file", "check_new_file", "describe_kind", "refuse_foreign_files", "refuse_special_input", "make_parents", "make_temp_dir", "nearest_existing", "share_as_mkdir", "open_append", "open_exclusive",
           "open_lock", "publish", "remove_created", "resolve", "resolve_folder",
           "sweep_temps", "temp_name", "temp_target", "unlink_if_same", "write_file"]

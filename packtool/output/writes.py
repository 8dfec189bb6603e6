"""How packtool writes (packtool.output's base half, with paths.py and lock.py; files.py is
their one import point).

This module owns every step that puts bytes or folders on disk: a file packtool writes for a
user (`plan -o`, `inspect --html`, `train --save`, a manifest, cache.json) is written to an
exclusive temporary beside it (`write_file`) and published by one link or rename (`publish`),
so a reader sees the old file or the new one, whole; a log is appended to, never through a
link or into a FIFO (`open_append`); a temporary folder is made under a name no one could have
put a link at (`make_temp_dir`) and shared as `mkdir` would on publishing (`share_as_mkdir`);
parent folders a run creates are the ones a failed run removes (`make_parents` /
`remove_created`). A temporary carries a record of its writer (output.leftovers), so a later
run removes those of dead processes, and only those (`sweep_temps`): a user's file under a
look-alike name is named, never removed.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from contextlib import contextmanager
from typing import IO, Iterable, Iterator

from packtool.errors import PacktoolError, arg, place_error
from packtool.output.leftovers import Sweep, drop_dead_record, mark_file, unmark_file
from packtool.output.paths import kind_name, check_new_file, refuse_uri, refused, resolve, temp_name, temp_target

_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK}

# A write that failed for room: what ran out, said so that the user knows what to free or move
_NO_ROOM = {errno.ENOSPC: "no space is left on its disk",
            errno.EDQUOT: "the disk quota there is used up",
            errno.EFBIG: "the file outgrew the largest file allowed (the file size limit, `ulimit -f`, or the file "
                         "system's)"}
# numpy's tofile reports a short write without its errno; on a regular file a write stops short
# only when the room ran out (or the device failed, which a retry does not mend either)
_SHORT_WRITE = re.compile(r"\b\d+ requested and \d+ written\b")


def _room_code(e: BaseException) -> int | None:
    """ENOSPC, EDQUOT or EFBIG when `e` failed a write for room, 0 for a short write, else None.
    pyarrow's OSError keeps the errno in its text only at times."""
    if not isinstance(e, OSError):
        return None
    code = e.errno
    if code is None:
        m = re.search(r"\[errno (\d+)\]", str(e), re.I)
        code = int(m[1]) if m else None
    if code in _NO_ROOM:
        return code
    return 0 if code is None and _SHORT_WRITE.search(str(e)) else None


def no_room(e: BaseException) -> str | None:
    """What ran out when `e` failed a write for room (a full disk, a used-up quota, the file
    size limit), else None."""
    code = _room_code(e)
    if code is None:
        return None
    return f"{_NO_ROOM[code]} ({errno.errorcode[code]})" if code else \
        "the write stopped short (a full disk, a used-up quota or the file size limit)"


def room_fix(e: BaseException, flag: str | None) -> str:
    """The fix for `no_room(e)`; `flag`: the argument that chose the place, if one did."""
    elsewhere = f", or give {flag} a place on another disk" if flag else ""
    if _room_code(e) == errno.EFBIG:
        return f"raise the file size limit (`ulimit -f`){elsewhere}, and re-run"
    return f"free space there{elsewhere}, and re-run"


def cannot_write(e: OSError, shown: str, flag: str) -> PacktoolError:
    """The one line for a file `flag` names that the system would not write: for room, what ran
    out and the fix; a cache file is the cache's error (`--json` kind `cache`: place_error)."""
    room, cls = no_room(e), place_error(flag)
    if room is None:
        return cls(f"cannot be written ({e.strerror or e})", path=shown, flag=arg(flag))
    return cls(f"cannot be written: {room}; {room_fix(e, arg(flag))}", path=shown, flag=arg(flag))


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
    if os.path.isfile(p) and not os.path.islink(p):
        drop_dead_record(p)  # published by a run killed before it took its record off
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
               manifest: bool = False, mine: str | None = None) -> Iterator[IO]:
    """Write `path` (see `check_new_file`; `checked`: the caller already resolved and checked
    it): yields a file object on an exclusive temporary beside it, published when the block
    ends without error; on an error the temporary goes and `path` is as it was.

    The temporary is born nameless (O_TMPFILE) with its writer's record on it, so a kill at any
    step leaves nothing, or a named temporary that carries the record, or the published file
    still carrying it (the next write's `sweep_temps` drops it). Where the file system makes no
    nameless files it is created under its name and marked at once (a kill between the two
    leaves an empty, unproven temporary: named, never removed)."""
    shown = os.fspath(path)
    p = shown if checked else check_new_file(path, flag, replace=replace, inputs=inputs, manifest=manifest,
                                                  mine=mine)
    sweep_temps(p)
    tmp = temp_name(p)
    fd, named = _new_temporary(p, tmp, shown, flag)
    try:
        try:
            with os.fdopen(fd, "w" if text else "wb", encoding="utf-8" if text else None, closefd=False) as f:
                yield f
        except OSError as e:  # the caller's writes into `f`: one that failed for room is this file's
            if no_room(e) is None:
                raise
            raise cannot_write(e, shown, flag) from None
        if not named and not replace:  # straight to its name: one link, or nothing at all
            unmark_file(fd)
            _link_fd(fd, p, shown, flag)
        else:
            if not named:
                _link_fd(fd, tmp, shown, flag)  # under the temporary's name only now, marked
                named = True
            publish(tmp, p, replace, shown, flag)
            unmark_file(fd)  # published, it is the user's file: the record comes off its inode
        if not manifest:  # an output folder's own files are the folder's (folder.swapped_outputs)
            _WRITTEN.append(shown)
    except BaseException:
        if named:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        raise
    finally:
        os.close(fd)


def _new_temporary(p: str, tmp: str, shown: str, flag: str) -> tuple[int, bool]:
    """(descriptor, whether it is already named `tmp`) of a new temporary for `p`, marked."""
    try:
        fd = os.open(os.path.dirname(p), os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, NEW_FILE_MODE)
    except (OSError, AttributeError):  # no nameless files here (or no O_TMPFILE at all)
        fd = None
    named = fd is None or not os.path.isdir(_PROC_FD)
    if named and fd is not None:
        os.close(fd)
    if named:
        try:
            fd = open_exclusive(tmp)
        except OSError as e:
            raise cannot_write(e, shown, flag) from None
    mark_file(fd)  # the proof a later sweep needs if this run is killed once it has a name
    return fd, named


_PROC_FD = "/proc/self/fd"
_WRITTEN: list[str] = []  # files this process put in place, as typed: never "nothing was written" after that


def written_files() -> list[str]:
    """The files `write_file` has put in place so far in this process, in order (as typed):
    what a run stopped after them (Ctrl-C, a failed stdout) must name as written."""
    return list(_WRITTEN)


def _link_fd(fd: int, name: str, shown: str, flag: str) -> None:
    """Give the nameless file `fd` the name `name`, never replacing what is there."""
    try:
        proc = os.open(_PROC_FD, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:  # linkat(AT_SYMLINK_FOLLOW): os.link calls plain link() unless a dir fd is given
            os.link(str(fd), name, src_dir_fd=proc, follow_symlinks=True)
        finally:
            os.close(proc)
    except FileExistsError:
        raise place_error(flag)(f"appeared while packtool was writing it; left as it is: pass "
                                  f"{arg('overwrite', True)} or give another name", path=shown, flag=arg(flag)) from None
    except OSError as e:
        raise cannot_write(e, shown, flag) from None


def publish(tmp: str, p: str, replace: bool, shown: str, flag: str) -> None:
    """Put the finished `tmp` at `p` in one step. Without `replace` a hard link, which fails
    if anything appeared at `p` meanwhile (file systems without links: a re-check, then a
    rename); with it a rename, which replaces a link's entry, never the file it points to."""
    if replace:
        if os.path.islink(p) or (os.path.lexists(p) and not os.path.isfile(p)):
            raise place_error(flag)("was replaced by a link or folder while packtool wrote it; "
                                      "left as it is", path=shown, flag=arg(flag))
        os.replace(tmp, p)
        return
    try:
        os.link(tmp, p, follow_symlinks=False)
    except FileExistsError:
        raise place_error(flag)(f"appeared while packtool was writing it; left as it is: pass "
                                  f"{arg('overwrite', True)} or give another name", path=shown, flag=arg(flag)) from None
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        if os.path.lexists(p):
            raise place_error(flag)("appeared while packtool was writing it; left as it is",
                                      path=shown, flag=arg(flag)) from None
        os.rename(tmp, p)
        return
    os.unlink(tmp)



def open_append(path: str | os.PathLike, flag: str, truncate: bool = False) -> IO:
    """A log opened for appending (`truncate`: started anew): created if missing, never
    through a link, only a regular file (a FIFO or device is refused rather than blocked on)."""
    flag = arg(flag)
    refuse_uri(path, flag)
    p = resolve(path)
    st = os.lstat(p) if os.path.lexists(p) else None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise refused(f"is {kind_name(st.st_mode)}; give a file name", path, p, flag)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0), NEW_FILE_MODE)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise refused("is a symbolic link; packtool never writes through one", path, p, flag) from None
        raise cannot_write(e, os.fspath(path), flag) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise refused(f"is {kind_name(st.st_mode)}; give a file name", path, p, flag)
    os.set_blocking(fd, True)
    f = os.fdopen(fd, "a", encoding="utf-8")
    f.buffer.raw.name = os.fspath(path)  # not the descriptor's number: a failed write names the log
    return f



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



__all__ = ["NEW_FILE_MODE", "cannot_write", "make_parents", "make_temp_dir", "no_room", "open_append", "room_fix", "open_exclusive", "written_files",
           "publish", "remove_created", "share_as_mkdir", "sweep_temps", "write_file"]

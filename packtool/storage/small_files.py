"""Every file packtool reads whole that is small by nature (settings, manifests, leases,
intents), local or on a store: `read_small`, its size bound checked before any byte is read, a
FIFO or device refused by kind (`kind_name`: the one wording of a file's kind); a Git LFS
pointer left in place of a file refused as one (`refuse_lfs_pointer`, read_small's bytes too).
"""
from __future__ import annotations

import os

from packtool.errors import PacktoolInputError
from packtool.storage.location import Location, locate
from packtool.storage.uri import is_uri

# What is small by nature is read whole, bounded (tokenize.json_depth's docstring says why);
# here, below every stage, so a reader's manifest read loads no numba.
# Settings files (tokenizer_config.json, state.json, a chat template): the largest real ones
# (added_tokens_decoder of a 200k vocabulary) are a few MB.
SETTINGS_BYTES = 64 << 20


def mib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def _read_bounded(f, size: int, limit: int) -> bytes:
    """At most limit + 1 bytes of `f` (`size`: what its stat says). Read in steps: read(n)
    allocates n bytes up front, and the bound is 256 MiB for a tokenizer.json; a FIFO, a /proc
    file (size 0) or a file that grows still stops past the bound."""
    parts, n, want = [], 0, size + 1 if size else 1 << 16
    while n <= limit:
        b = f.read(min(want, limit + 1 - n))
        if not b:
            break
        parts.append(b)
        n, want = n + len(b), 1 << 16
    return b"".join(parts)


def kind_name(mode: int) -> str:
    """A file's kind in words, from its st_mode: the one wording (output.paths re-exports it)."""
    import stat
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


# Git's LFS leaves this pointer (a few lines, under 1024 bytes by its spec) in place of each large
# file of a repository cloned without git-lfs (a Hugging Face repo: its Parquet, tokenizer.json)
_LFS = b"version https://git-lfs.github.com/spec/"
_LFS_MOST = 1024


def _lfs_words(head: bytes) -> str | None:
    if not head.startswith(_LFS):
        return None
    size = next((w[5:].decode("ascii", "replace") for w in head.split(b"\n") if w.startswith(b"size ")), None)
    stands = f" standing for a file of {size} bytes" if size and size.isdigit() else ""
    return (f"is a Git LFS pointer{stands}, not the file itself: the repository was cloned without its LFS "
            f"files; run `git lfs pull` there (or download the files with `hf download`)")


def refuse_lfs_pointer(path: str, err=PacktoolInputError, **where) -> None:
    """A local file that is a Git LFS pointer is refused as what it is (any parser would call it
    invalid JSON, a damaged Parquet or tokenizer, and "fix or remove it" would send the user to
    edit a file that only has to be fetched). A regular file under the pointer's size bound only:
    one read of at most 1 KiB; a FIFO is never opened."""
    import stat
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _LFS_MOST:
            return
        with open(path, "rb") as f:
            head = f.read(_LFS_MOST)
    except OSError:  # missing or unreadable: the caller's own words
        return
    said = _lfs_words(head)
    if said:
        raise err(said, **({"path": path} | where))


def _open_regular(local: str, shown_path: str, what: str, err, where: dict):
    """`local` opened for reading if it is a regular file (followed through links). Opened
    non-blocking first: a FIFO with no writer would block open() itself forever, and a device
    (/dev/zero) has no size to bound, so both are refused by kind, not read. A folder keeps
    open()'s IsADirectoryError (the caller's own message)."""
    import stat
    fd = os.open(local, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return open(local, "rb")  # open()'s own IsADirectoryError, which the callers name
        if not stat.S_ISREG(mode):
            raise err(f"is {kind_name(mode)}, not a regular file: a {what} is read whole, and packtool "
                      f"never reads a pipe or device as one; give the {what} itself (a saved copy)",
                      **({"path": shown_path} | where))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_small(path: "str | Location", limit: int, what: str, fix: str, err=PacktoolInputError, **where) -> bytes:
    """The bytes of `path`, a `what` file, refused (`err`, `where`: its path/flag) over `limit`
    bytes before any is read; the bounded read also stops a file that grows; a FIFO or device is refused by kind. Every
    file packtool reads whole that is small by nature comes through here, local or (a URI, a
    Location) on a store. A missing file is the caller's FileNotFoundError."""
    local = path
    if isinstance(path, Location) or is_uri(path):
        loc = path if isinstance(path, Location) else locate(path)
        path, local = loc.shown, loc.path if loc.local else None
    if local is None:  # an object store holds no FIFOs or devices
        with loc.open_input() as f:  # the size from opening it: nothing is read past the bound
            size = f.size()
            data = _read_bounded(f, size, limit) if size <= limit else b""
    else:
        with _open_regular(local, path, what, err, where) as f:
            size = os.fstat(f.fileno()).st_size
            data = _read_bounded(f, size, limit) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise err(f"is {mib(max(size, len(data)))}, over the {mib(limit)} any {what} takes: not a {what} "
                  f"(a damaged or copied-over file?); {fix}", **({"path": path} | where))
    said = _lfs_words(data[:_LFS_MOST])
    if said:  # a settings file of a repository cloned without git-lfs
        raise err(said, **({"path": path} | where))
    return data


__all__ = ["SETTINGS_BYTES", "kind_name", "mib", "read_small", "refuse_lfs_pointer"]

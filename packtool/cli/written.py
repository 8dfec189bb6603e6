"""The file a failed write was writing, and the line for a write that failed for room (a full
disk, a used-up quota, the file size limit): a Python file's or pyarrow's write raises an
OSError naming no file, so "File too large" alone reached the user. The file is found where the
write failed (the traceback's writer); the place's argument (cli.places, through failure._place)
gives the fix.
"""
from __future__ import annotations

import functools
import io
import os
import re
import tempfile

from packtool.errors import one_line, shown


# output.files is imported when an error is reported, not with the CLI (it loads numpy)
def no_room(e: BaseException) -> str | None:
    from packtool.output.files import no_room as said
    return said(e)


def _room_fix(e: BaseException, flag: str | None) -> str:
    from packtool.output.files import room_fix
    return room_fix(e, flag)


@functools.cache
def _built_in() -> re.Pattern:
    from packtool.output.files import SPILL_TAG, TMP_TAG
    return re.compile(rf"^\.(.+)\.(?:{TMP_TAG}|{SPILL_TAG})-\d+-[^/]*\Z")


def published(where: str) -> str:
    """`where` with the temporary folder an output is built in (output.folder's `.NAME.packtool-tmp-
    PID-...` beside NAME) read as NAME: the file's place once published."""
    parts = where.split(os.sep)
    return os.sep.join(m.group(1) if (m := _built_in().match(p)) else p for p in parts)


def failed_file(e: OSError) -> str | None:
    """The file an OSError is about: its own filename, else, for a write that failed for room
    (a Python file's or pyarrow's write names none), the file being written."""
    if e.filename is not None or no_room(e) is None:
        return e.filename
    return being_written(e)


def being_written(e: BaseException | None) -> str | None:
    """The file the deepest frame of `e`'s traceback (then its cause's) was writing: a file
    object open for writing, or a Parquet writer, among that frame's locals. Deepest first: the
    write that failed, not a caller's other open files."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        frames, tb = [], e.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            for v in list(frame.f_locals.values()):
                if (p := _written_path(v)) is not None:
                    return p
        e = e.__cause__ or e.__context__
    return None


def _written_path(v: object) -> str | None:
    if isinstance(v, io.IOBase):
        name, mode = getattr(v, "name", None), getattr(v, "mode", "")
        writing = isinstance(mode, str) and any(c in mode for c in "wax+")
        return name if writing and isinstance(name, str) else None
    if type(v).__name__ == "ParquetWriter" and isinstance(getattr(v, "where", None), (str, os.PathLike)):
        return os.fspath(v.where)
    return None


# memory.stage_of's stage, as a write failing in it is said
_WRITING_STAGE = {"slabs": "writing slabs", "training on": "training", "writing": "writing"}


def no_room_line(e: OSError, where: str | None, place) -> str:
    """A write that failed for room: the file (or, where none is known, the stage), what ran
    out, and the fix: free space, or move the argument that chose the place."""
    from packtool.cli.memory import stage_of
    stage = stage_of(e)
    during = f" while {_WRITING_STAGE.get(stage, stage)}" if stage else ""
    if where is None:
        return one_line(f"a write failed{during}: {no_room(e)}; {_room_fix(e, None)}")
    flag = place[0] if place else None
    if flag is None and not place and os.path.abspath(where).startswith(tempfile.gettempdir() + os.sep):
        flag = "TMPDIR"  # packtool's temporaries with no output beside them
    return one_line(f"{shown(where)}: cannot be written{during}: {no_room(e)}; {_room_fix(e, flag)}")


_NO_TEMP = "No usable temporary directory found in"


def no_temp_folder(e: BaseException) -> str | None:
    """The line for Python's tempfile finding no folder it can write a file in (a library's import
    asks it first: torch's, through dill, under `ulimit -f 0`), else None: it said only the folders it
    tried (kind io, no flag). Each folder took no 4-byte file: the file size limit, when that is what
    refuses it, else each folder is missing, read-only or full; the system's temp folder is TMPDIR's."""
    if not isinstance(e, FileNotFoundError) or _NO_TEMP not in str(e):
        return None
    import resource
    tried = str(e).split(_NO_TEMP, 1)[1].strip()
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and limit < 4:
        return one_line(f"no usable temporary folder: no file can be written in any of {tried}, the file size limit "
                        f"(`ulimit -f`) being {limit} bytes; raise the file size limit (TMPDIR names another folder, "
                        f"but none takes a file under this limit), and re-run")
    return one_line(f"no usable temporary folder: a file could be written in none of {tried} (each missing, "
                    f"read-only or full); set TMPDIR to a folder that takes files, or free space there, and re-run")


__all__ = ["being_written", "failed_file", "no_room", "no_room_line", "no_temp_folder", "published"]

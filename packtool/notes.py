"""packtool's one owner of notes: a line about something it did on its own or the user should
know (a cache rebuilt, columns not read, leftovers removed, a flag without effect). Each is said
once on stderr (stdout stays for tables and --json) and kept in `NOTES`, where a library caller
reads them and the CLI puts those of its command into the --json object (`since`)."""
from __future__ import annotations

import sys

NOTES: list[str] = []  # every note said in this process, in order


def note(message: str, label: str = "packtool") -> None:
    """Say `message` on stderr as `<label>: <message>` and keep it."""
    NOTES.append(message)
    try:
        sys.stderr.write(f"{label}: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: the note is still kept for --json
        pass


def mark() -> int:
    """Where the notes of what starts now begin (give it to `since`)."""
    return len(NOTES)


def since(start: int) -> list[str]:
    """The notes said from `start` (a `mark`) on."""
    return list(NOTES[start:])


__all__ = ["NOTES", "mark", "note", "since"]

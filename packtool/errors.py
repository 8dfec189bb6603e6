"""The one error type for bad input: a single line naming the file, the row and the fix.

The CLI maps it to exit code 2; library callers can catch it without parsing text.
"""
from __future__ import annotations


class PacktoolInputError(ValueError):
    """Bad input data, tokenizer or flag. The message is one line (newlines are folded)."""

    def __init__(self, message: str, *, path: str | None = None, row: int | None = None,
                 flag: str | None = None) -> None:
        where = ", ".join(p for p in (str(path) if path is not None else None,
                                       f"row {row}" if row is not None else None) if p)
        text = " ".join(str(message).split())
        if flag is not None and flag not in text:
            text += f" (see {flag})"
        super().__init__(f"{where}: {text}" if where else text)
        self.path = path
        self.row = row
        self.flag = flag

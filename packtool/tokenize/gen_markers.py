"""The two private-use characters that mark a `{% generation %}` block's output while a chat
template renders (templates.py): the loss spans are where they stood. So they are packtool's
alone. A row's value holding one would be read as a block's edge (user text made loss, or loss
lost), so every value handed to such a template is checked first (`marked_at`), and the
rendered text must then hold them as the blocks wrote them: open, close, open, close
(`strip_markers`); anything else is the template rewriting its own blocks (a `reverse` or
`truncate` filter around one, a marker in the template's text).
"""
from __future__ import annotations

import jinja2
import numpy as np
import pyarrow as pa

OPEN, CLOSE = "\ue000", "\ue001"


class MarkedValue(Exception):
    """A row's value holds a marker: `where` names it as the template gets it
    (`messages[1].name`); the caller names the row (a data error, not the template's)."""

    def __init__(self, where: str, char: str) -> None:
        super().__init__(where)
        self.where = where
        self.char = char

    def text(self, fix: str = "remove U+E000 and U+E001 from the row") -> str:
        return (f"{self.where} holds U+{ord(self.char):04X}, a private-use character packtool reserves to "
                f"mark the chat template's {{% generation %}} blocks (the loss), so which text is loss "
                f"could not be told; {fix}")


def _holds(s: str) -> str:
    """The marker that comes first in `s`."""
    i = s.find(OPEN)
    return OPEN if i >= 0 and not 0 <= s.find(CLOSE, 0, i) else CLOSE


def _find(value) -> list | None:
    """The path (innermost step first) to the first string in `value` holding a marker, else
    None. A plain recursion that builds no path on the way (a batch the Arrow search flags has
    every row walked)."""
    t = type(value)
    if t is str:
        return [] if OPEN in value or CLOSE in value else None
    if t is dict:
        for k, v in value.items():
            if type(k) is str and (OPEN in k or CLOSE in k):
                return [("key", k)]
            found = _find(v)
            if found is not None:
                found.append((".", k))
                return found
        return None
    if t is list or t is tuple:
        for i, v in enumerate(value):
            found = _find(v)
            if found is not None:
                found.append(("[]", i))
                return found
    return None  # numbers, None, booleans: their text never holds one


def marked_at(values: dict) -> MarkedValue | None:
    """The first of `values` (template variable -> value: messages, tools, documents, special
    tokens) whose text holds a marker, named by its path (`tools[0].function.description`; a
    dict key as `tools[0].function.parameters.properties key '\\ue000x'`), else None."""
    for name, value in values.items():
        path = _find(value)
        if path is None:
            continue
        where, leaf = name, value
        for kind, k in reversed(path):
            if kind == "key":
                where, leaf = where + f" key {ascii(k)}", k
            else:
                where += f"[{k}]" if kind == "[]" or not isinstance(k, str) else f".{k}"
                leaf = leaf[k]
        return MarkedValue(where, _holds(leaf))
    return None


def _texts(arr: pa.Array, top: bool = True) -> list | None:
    """The UTF-8 bytes of the strings in `arr` (any nesting of lists and structs, as sliced) as
    (uint8 view, whether a top-level string: a row's tools / documents as JSON text, decoded
    later) per string leaf; None for a type whose values this cannot read from its own buffers
    (a dictionary, a view, an extension: the caller then checks every row)."""
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        _, offsets, data = arr.buffers()
        if data is None or not len(arr):
            return []
        at = np.frombuffer(offsets, np.int64 if pa.types.is_large_string(t) else np.int32)
        start, end = int(at[arr.offset]), int(at[arr.offset + len(arr)])
        return [(np.frombuffer(data, np.uint8)[start:end], top)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _texts(arr.flatten(), False)
    if pa.types.is_struct(t):
        runs: list = []
        for child in arr.flatten():
            more = _texts(child, False)
            if more is None:
                return None
            runs += more
        return runs
    if (pa.types.is_primitive(t) or pa.types.is_null(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t)):
        return []  # numbers, times, bytes: a template writes their text, never a marker
    return None


def _holds_bytes(b: np.ndarray, escapes: bool) -> bool:
    """Whether UTF-8 `b` holds a marker (EE 80 80 / EE 80 81) or, with `escapes`, a JSON escape
    of one (`\\ue000`, any case of hex). Vectorized: the rare lead bytes first."""
    lead = np.flatnonzero(b[:-2] == 0xEE)
    if len(lead) and ((b[lead + 1] == 0x80) & ((b[lead + 2] | 1) == 0x81)).any():
        return True
    if not escapes:
        return False
    slash = np.flatnonzero(b[:-5] == 0x5C)
    return bool(len(slash)) and bool(((b[slash + 1] == 0x75) & ((b[slash + 2] | 0x20) == 0x65) & (b[slash + 3] == 0x30)
                                      & (b[slash + 4] == 0x30) & ((b[slash + 5] | 1) == 0x31)).any())


def arrow_may_hold(columns) -> bool:
    """Whether any of `columns` (a batch's arrays, before they become Python values) may hold a
    marker. A vectorized search of their strings' bytes, so a batch needs no Python walk per row;
    a false hit (an escaped backslash before `ue000`) or a type this cannot search only sends
    the batch's rows to `marked_at`. A nested string is never JSON-decoded later (json_types
    keeps free-form values' text with the characters themselves), so only a top-level string
    is searched for escapes too."""
    for col in columns:
        runs = _texts(col)
        if runs is None or any(_holds_bytes(b, top) for b, top in runs):
            return True
    return False


def strip_markers(marked: str) -> tuple[str, list[tuple[int, int]]]:
    """The text without markers, and each block's span in it. The markers must come as the
    blocks wrote them (the values were checked): in order, balanced, never nested."""
    spans: list[tuple[int, int]] = []
    out: list[str] = []
    pos = length = 0
    end = len(marked)
    while True:
        i = marked.find(OPEN, pos)
        if marked.find(CLOSE, pos, end if i < 0 else i) >= 0:
            raise _rewritten("a block's end comes before its start")
        if i < 0:
            out.append(marked[pos:])
            return "".join(out), spans
        j = marked.find(CLOSE, i + 1)
        if j < 0:
            raise _rewritten("a block has no end")
        if marked.find(OPEN, i + 1, j) >= 0:
            raise _rewritten("a block starts inside another")
        out.append(marked[pos:i])
        length += i - pos
        if j > i + 1:
            spans.append((length, length + j - i - 1))
        out.append(marked[i + 1:j])
        length += j - i - 1
        pos = j + 1


def _rewritten(what: str) -> jinja2.exceptions.TemplateError:
    return jinja2.exceptions.TemplateError(
        f"the rendered text does not hold the {{% generation %}} blocks as written ({what}): the "
        f"template nests a block in another, rewrites a block's output (a filter such as reverse "
        f"or truncate around it) or writes U+E000 / U+E001 itself; keep each {{% generation %}} ... "
        f"{{% endgeneration %}} whole, unnested and outside such filters")

"""Column types a shape can read: checked on each record batch before any row is converted,
so a Parquet column of the wrong type is one line naming the file, the row and the column,
never a traceback from deep inside rendering or tokenizing."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from packtool.errors import PacktoolInputError

_FIX = "fix the data, or pick other columns with --text-field / --prompt-field / --response-field / --shape"


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _is_number_list(t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return True
    if not _is_list(t):
        return False
    v = t.value_type
    return pa.types.is_integer(v) or pa.types.is_floating(v) or pa.types.is_boolean(v) or pa.types.is_null(v)


def _is_message_list(t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return True
    return _is_list(t) and (pa.types.is_struct(t.value_type) or pa.types.is_null(t.value_type))


_WANT = {
    "text": (_is_text, "text (string)"),
    "prompt_completion": (_is_text, "text (string)"),
    "fields": (_is_text, "text (string)"),
    "alpaca": (_is_text, "text (string)"),
    "chat": (_is_message_list, "a list of messages ({role, content} objects)"),
    "sharegpt": (_is_message_list, "a list of turns ({from, value} objects)"),
    "tokens": (_is_number_list, "a list of integer token ids"),
}


def check_batch_types(batch: pa.RecordBatch, shape, path: str, first_row: int) -> None:
    """Raise PacktoolInputError if a column `shape` reads has a type it cannot use."""
    ok, want = _WANT.get(shape.kind, (None, None))
    if ok is None:
        return
    for name in shape.columns:
        if name not in batch.schema.names:
            continue
        col = batch.column(name)
        if ok(col.type):
            continue
        valid = pc.is_valid(col)
        row = next((i for i, v in enumerate(valid.to_pylist()) if v), 0)
        raise PacktoolInputError(f"column {name!r} holds {col.type}, but a {shape.kind} row needs "
                                 f"{want}; {_FIX}", path=path, row=first_row + row)


__all__ = ["check_batch_types"]

"""What a batch's rows must hold before they are rendered: each shape's columns of the right
Arrow type, and no null or empty prompt, response or chat turn (an error naming the row, or a
row --on-empty skip skips), nor a turn whose text sits under another key (a schema to rename).
`shapes.render_batch` runs these checks; what a batch's Arrow struct tells at once (a turn
with text, a key with a value) is read here too, so that Python looks only at the rest.
"""
from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa

from packtool.arrays import np_of
from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.tokenize.messages import text_part
from packtool.tokenize.reply_roles import why

# TRL's two loss masks (shape_detect.LOSS_COLUMNS): both given, TRL trains where both are 1 (token_rows)
TRL_MASKS = ("assistant_masks", "completion_mask")


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)
            or getattr(pa.types, "is_string_view", lambda _: False)(t))


def _is_messages(t: pa.DataType) -> bool:
    return pa.types.is_null(t) or ((pa.types.is_list(t) or pa.types.is_large_list(t)) and (
        pa.types.is_struct(t.value_type) or pa.types.is_null(t.value_type)))


def check_column_types(batch: pa.RecordBatch, shape, path: str, first_row: int) -> None:
    """`shape` (a `shape_detect.Shape`): its text columns hold strings and message columns lists of
    objects, else one line naming the column, its type and the first row that has a value
    (Parquet columns of another type, a JSON field that is a number in some rows)."""
    want = _is_messages if shape.kind in ("chat", "sharegpt") else _is_text
    # a chat row's tools / documents are the template's to read (chat_keys.row_value checks them)
    for name in shape.columns[:1] if want is _is_messages else shape.columns:
        col = batch.column(name)
        if not want(col.type):
            valid = col.is_valid().to_numpy(zero_copy_only=False).nonzero()[0]
            what = "lists of message objects" if want is _is_messages else "strings"
            raise PacktoolInputError(
                f"column {name} holds {col.type}, {shape.kind} rows need {what}; convert the "
                f"column (or pick another with {arg('shape')}/{arg('text_field')}/{arg('prompt_field')})",
                flag=cli_flag("shape"), path=path, row=first_row + int(valid[0]) if valid.size else first_row)


def _no_text(content) -> bool:
    """null, "" or only whitespace, or OpenAI content parts that join to such (no part, or only
    text parts without text: json_types makes a "" beside parts such a part); a non-text part is
    refused later. Whitespace is no text here as in a text row (`{"text": "  "}` is an empty
    example): a reply of spaces trains the model to answer nothing, and many templates trim it."""
    if isinstance(content, list):
        return all(text_part(b) and _blank(b.get("text")) for b in content)
    return _blank(content)


def _blank(v) -> bool:
    return v is None or (type(v) is str and (not v or v.isspace()))


def null_message(m) -> bool:
    """A chat turn without content (null, missing, "" or empty parts) and without a tool call:
    "" is the same empty turn as null, trained on as "answer nothing"."""
    if not isinstance(m, dict):
        return False
    content = m.get("content")
    if type(content) is str and content and not content.isspace():  # the common turn, at once
        return False
    return _no_text(content) and not (m.get("tool_calls") or m.get("tool_call"))


def null_value(t) -> bool:
    """A ShareGPT turn without text (its `value` null, missing, "" or only whitespace)."""
    return isinstance(t, dict) and _blank(t.get("value"))


def blank_fields(row: tuple, names: list[str]) -> list[str]:
    """The names of a two-field row's prompt and response (its first two values) that hold no
    text: null, "" or only whitespace, as a chat turn's content (`_no_text`) and a text row
    (an empty prompt trains a reply to nothing, an empty response to answer nothing). A row's
    other values (alpaca's input) are optional."""
    return [names[j] for j in (0, 1) if _blank(row[j])]


def refuse_null(names: list[str], path: str, row: int, turn: bool = True) -> None:
    """An empty example for its values `names` (text null, missing, "" or only whitespace): the
    same words and the same --on-empty fix as `bad_example`'s for a whole row. `turn`: the value
    becomes a turn of a chat template (else an untemplated prompt or response)."""
    became = "an empty turn" if turn else "an empty prompt or response"
    raise PacktoolInputError(f"empty example: {_and(names)} {'is' if len(names) == 1 else 'are'} null, missing or "
                             f"empty (or only whitespace) (it would become {became}, trained on); fill it, drop "
                             f"the row, or pass {arg('on_empty', 'skip')} to skip such rows (counted in cache.json)",
                             path=path, row=row, flag=cli_flag("on_empty"))


def bad_example(shape, empty: bool, path: str, row: int, roles=None) -> PacktoolInputError:
    """A row that gave no token (`empty`) or no loss token, under --on-empty error: the key(s) at
    fault named with the row, so that the user looks at the right field, not only the row.
    `shape`: the file's `shape_detect.Shape` (its columns in role order; held ones last);
    `roles`: a chat row's turns' roles, when it rendered with no trained turn (reply_roles.py)."""
    cols = shape.columns[:len(shape.columns) - len(shape.held)]
    turns = shape.kind in ("chat", "sharegpt")
    if empty:
        if turns:
            what = f"{cols[0]} is null or holds no turns"
        elif shape.kind == "tokens":
            what = f"{cols[0]} is null, missing or holds no tokens"
        else:  # text, fields, prompt/completion, alpaca: every text column gave nothing
            keys = [c for c in cols if c not in ("loss_mask", "labels", "attention_mask")]
            what = f"{_and(keys)} {'is' if len(keys) == 1 else 'are'} null, empty or only whitespace"
        what = f"empty example: {what}"
    else:
        if roles is not None:
            what = why(cols[0], roles)
        elif turns:
            what = (f"{cols[0]} gives no assistant tokens to train on (only a turn whose role is 'assistant' "
                    f"and whose weight is not 0 is trained, and of it what the chat template trains)")
        elif shape.kind == "tokens":
            # the loss column read (shape_detect.LOSS_COLUMNS' first given), after input_ids
            col = next((c for c in cols[1:] if c != "attention_mask"), cols[0])
            if col == TRL_MASKS[0] and TRL_MASKS[1] in cols:  # read as one, as TRL trains (token_rows)
                col = "assistant_masks AND completion_mask (TRL's targets: where both are 1)"
            what = f"{col} masks every token after the first"
        else:
            what = f"{cols[1] if len(cols) > 1 else cols[0]} gives no tokens to train on"
        # a mask whose only target is the row's first token is one of these (encode.no_target): said,
        # as the mask the user gave has a 1 there
        first = "" if roles is not None else " (a sequence's first token is never a target)"
        what = f"example with no loss tokens (all masked): {what}{first}"
    fill = "" if roles is not None else "fill it, "  # a role to rename: its text is there already
    return PacktoolInputError(f"{what}; {fill}drop the row, or pass {arg('on_empty', 'skip')} to skip such "
                              f"rows (counted in cache.json)", path=path, row=row, flag=cli_flag("on_empty"))


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def turn_keys(turns, j: int) -> list[str]:
    m = (turns or [None] * (j + 1))[j]
    return [k for k, v in m.items() if not _no_text(v)] if isinstance(m, dict) else []


def refuse_keys(column: str, j: int, keys: list[str], key: str, path: str, row: int,
                 everywhere: bool) -> None:
    """A turn that holds its text under another key (`text`, `message`): a schema to rename,
    not an empty turn, so --on-empty skip (which would drop every such row) is no fix."""
    fix = (f"rename the key to {key} (chat turns are {{role, {key}}})" if everywhere else
           f"fill {key}, rename the key, drop the row, or pass {arg('on_empty', 'skip')} to skip such rows (counted)")
    raise PacktoolInputError(f"{column}[{j}]: turn has keys {', '.join(keys)} but no {key}; {fix}",
                             path=path, row=row)


def schema_lacks(col: pa.Array, key: str) -> bool:
    """Whether no turn of the column can have `key`: the turns' struct type has no such field
    (the JSON reader unites the keys of every row of the batch) nor a tool call."""
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        return False
    names = {t.value_type.field(i).name for i in range(t.value_type.num_fields)}
    return key not in names and not names & {"tool_calls", "tool_call"}


# ---------------------------------------------------------------- per batch, from Arrow

def valid_values(a: pa.Array) -> np.ndarray:
    """Per value: not null, from the validity bits (Array.is_valid would import pyarrow.compute)."""
    if pa.types.is_null(a.type):
        return np.zeros(len(a), bool)
    if not a.null_count:
        return np.ones(len(a), bool)
    bits = np.unpackbits(np.frombuffer(a.buffers()[0], np.uint8), bitorder="little")
    return bits[a.offset:a.offset + len(a)].astype(bool)


_NEVER_EMPTY = (pa.types.is_null, pa.types.is_boolean, pa.types.is_integer, pa.types.is_floating,
                pa.types.is_list, pa.types.is_large_list, pa.types.is_struct)


def has_value(a: pa.Array) -> np.ndarray:
    """Per value: neither null nor "" (no text: a turn's empty key leaves nothing out)."""
    t = a.type
    if _is_str(t) and len(a):
        width = np.dtype(np.int32 if pa.types.is_string(t) else np.int64)
        offs = np.frombuffer(a.buffers()[1], width, len(a) + 1, a.offset * width.itemsize)
        return valid_values(a) & (np.diff(offs) > 0)
    if any(is_type(t) for is_type in _NEVER_EMPTY):  # no value of these reads back as ""
        return valid_values(a)
    return np.array([v is not None and v != "" for v in a.to_pylist()], bool)


def turn_rows(col: pa.Array) -> tuple[pa.StructArray, np.ndarray] | None:
    """A batch's turn column (list<struct>) as (its rows' turns, each turn's row); a turn of a
    null row is no turn (row -1). None for a column of another type (no struct to read)."""
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        return None
    offs = np_of(col.offsets)  # the slice's rows (col.values is the whole child)
    turns = col.values.slice(int(offs[0]), int(offs[-1] - offs[0]))
    row_of = np.repeat(np.arange(len(col)), np.diff(offs))
    return turns, np.where(valid_values(col)[row_of], row_of, -1)


def rows_with_empty_turns(col: pa.Array, kind: str) -> np.ndarray | None:
    """Per row of a batch's turn column: whether some turn may be empty (`null_message` /
    `null_value` decide, turn by turn, for those rows only). A turn with text, or a chat turn
    with a tool call, is read off the Arrow struct instead (a Python test of every turn cost as
    much as the keys' scan). None: every row may."""
    parts = turn_rows(col)
    if parts is None:
        return None
    turns, row_of = parts
    names = [f.name for f in turns.type]
    fine = ~valid_values(turns)  # a null turn is no empty one (null_message(None) is False)
    text = "content" if kind == "chat" else "value"
    if text in names and _is_str(turns.type.field(text).type):
        fine |= has_value(turns.field(text)) & ~maybe_blank(turns.field(text))
    for call in ("tool_calls", "tool_call") if kind == "chat" else ():
        if call in names:
            fine |= _truthy(turns.field(call))
    some = np.zeros(len(col), bool)
    some[row_of[~fine & (row_of >= 0)]] = True
    return some


def maybe_blank(a: pa.Array) -> np.ndarray:
    """Per string: whether it may be only whitespace (`_blank` decides, for those only): every
    byte ASCII whitespace or not ASCII (a Unicode space, or text Python must look at)."""
    width = np.dtype(np.int32 if pa.types.is_string(a.type) else np.int64)
    offs = np.frombuffer(a.buffers()[1], width, len(a) + 1, a.offset * width.itemsize)
    data = a.buffers()[2]
    return _blank_bytes(np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8), offs)


@numba.njit(cache=True)
def _blank_bytes(data, offs):
    out = np.ones(offs.shape[0] - 1, np.bool_)
    for i in range(out.shape[0]):
        for k in range(offs[i], offs[i + 1]):
            b = data[k]
            if b < 0x80 and not (b == 32 or 9 <= b <= 13 or 28 <= b <= 31):  # str.isspace's ASCII
                out[i] = False
                break
    return out


def _is_str(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _truthy(a: pa.Array) -> np.ndarray:
    """Per value: one Python reads as true for sure (a struct with keys; a list with items)."""
    if pa.types.is_struct(a.type) and a.type.num_fields:
        return valid_values(a)
    if (pa.types.is_list(a.type) or pa.types.is_large_list(a.type)) and len(a):
        offs = np_of(a.offsets)
        return valid_values(a) & (np.diff(offs) > 0)
    return np.zeros(len(a), bool)

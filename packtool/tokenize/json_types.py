"""JSON rows whose types Arrow's inference cannot hold: read in Python instead, one type per field.

Arrow gives each column (each nested field) one type per block of JSON Lines, or per batch of
a JSON array's rows. JSON has two shapes Arrow refuses or changes there:
- a chat turn's `content` that is a string in one turn and OpenAI content parts
  (`[{"type": "text", "text": ...}]`) in another: the usual OpenAI export (parts for the user,
  a string for the reply). Both are one content (`messages.normalize_message` joins the text
  parts), so such rows get every string content as one text part: nothing changes meaning.
- a string that looks like a date: Arrow's JSON reader turns a field whose every value of the
  block looks like one into a timestamp (a reply "2024-01-01" became a datetime; a text column
  became a "timestamp column"). JSON has no timestamps, so such a block is read in Python.
Any other clash (a number in one row, a string in the next) is named with the field, both rows
and the fix. `text_readers` calls this only for a block Arrow failed on or gave a timestamp.
"""
from __future__ import annotations

import json

import pyarrow as pa

from packtool.errors import PacktoolInputError
from packtool.json_text import BeyondFloat64Error, DuplicateKeyError, invalid_json, raw_decode

# The chat shapes' turn lists whose `content` may be a string or OpenAI content parts.
_TURN_LISTS = ("messages",)
# Every chat shape's turn list, with the turn object it holds (as the row checks name it).
_CHAT_LISTS = {"messages": "{role, content}", "conversations": "{from, value} (ShareGPT)"}


def has_timestamp(t: pa.DataType) -> bool:
    """Whether Arrow inferred a timestamp anywhere in `t` (never a JSON type)."""
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return True
    if pa.types.is_struct(t):
        return any(has_timestamp(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return has_timestamp(t.value_type)
    return False


# A tool call's `arguments` and a row's tools / documents are free-form objects: Arrow gives
# every row of a block the union of their keys (each absent one a null, the call of row 0
# rendered as {"a": 1, "b": null} because row 1's call had b), and an object in one row with a
# string in another fails. Read in Python, each is kept as its own JSON text: arguments under
# this key (`messages.unwrap_arguments` decodes it), tools / documents as a string
# (`chat_keys.row_value` decodes it). A private-use code point: no real key starts with it.
ARGUMENTS = "\ue000json"
_FREE = ("tools", "documents")


def free_form(t: pa.DataType, name: str = "") -> bool:
    """Whether Arrow gave a free-form object (above) a struct type: its keys are united."""
    if name in _FREE:
        return not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t))
    if pa.types.is_struct(t):
        return name == "arguments" or any(free_form(t.field(i).type, t.field(i).name) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return free_form(t.value_type, "")
    return False


def _keep_free_form(rows: list[dict]) -> None:
    for r in rows:
        for k in _FREE:
            if isinstance(r.get(k), (list, dict)):
                r[k] = json.dumps(r[k], ensure_ascii=False)
        for m in (m for key in _TURN_LISTS if isinstance(r.get(key), list) for m in r[key]):
            calls = m.get("tool_calls") if isinstance(m, dict) else None
            for c in ([m.get("tool_call")] + (calls if isinstance(calls, list) else [])) if isinstance(m, dict) else ():
                for fn in (c, c.get("function")) if isinstance(c, dict) else ():
                    if isinstance(fn, dict) and fn.get("arguments") is not None:
                        fn["arguments"] = {ARGUMENTS: json.dumps(fn["arguments"], ensure_ascii=False)}


def unite_content(rows: list[dict]) -> None:
    """In place: when some turn's content is a list of parts, every string content becomes one
    text part (`normalize_message` joins them back: the template sees the same text)."""
    turns = [m for r in rows for key in _TURN_LISTS if isinstance(r.get(key), list)
             for m in r[key] if isinstance(m, dict)]
    if not any(isinstance(m.get("content"), list) for m in turns):
        return
    for m in turns:
        if isinstance(m.get("content"), str):
            m["content"] = [{"type": "text", "text": m["content"]}]


def _kind(v) -> str | None:
    if v is None:
        return None
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(v), type(v).__name__)


def _a(kind: str) -> str:
    """A JSON type's name with its article: an array, an object, a number."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _walk(v, path: str, seen: dict, row: int):
    """The first field (as `messages[].content`) whose JSON type differs from the one an earlier
    value of it had: (field, earlier type, earlier row, this type); None if every field has one."""
    kind = _kind(v)
    if kind is None:
        return None
    first = seen.setdefault(path, (kind, row))
    if first[0] != kind and {first[0], kind} != {"number"}:
        return path.lstrip("."), first[0], first[1], kind
    if kind == "object":
        for k, x in v.items():
            found = _walk(x, f"{path}.{k}", seen, row)
            if found:
                return found
    elif kind == "array":
        for x in v:
            found = _walk(x, f"{path}[]", seen, row)
            if found:
                return found
    return None


def rows_batch(rows: list[dict], path: str, row_name) -> pa.RecordBatch:
    """`rows` (decoded JSON objects) as one batch. `row_name(i)` says where row i of the list is
    in the file ("line 7", "row 3"); a field of two types is named with both places."""
    unite_content(rows)
    _keep_free_form(rows)
    try:  # not from_pylist: it takes the first row's keys and drops a key only later rows have
        return pa.RecordBatch.from_struct_array(pa.array(rows, type=None if rows else pa.struct([])))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        _refuse_odd_turns(rows, path, row_name)
        _refuse_plain_parts(rows, path, row_name)
        seen: dict = {}
        for i, r in enumerate(rows):
            found = _walk(r, "", seen, i)
            if found:
                field, was, at, kind = found
                where = "in the same row" if at == i else f"at {row_name(at)}"
                err = PacktoolInputError(
                    f"at {row_name(i)}: field {field} is a JSON {kind} here but {_a(was)} {where}; "
                    f"give the field one type in every row (only a chat turn's content may be a "
                    f"string or a list of content parts)", path=path)
                # the rows' keys: a reader asking only for the column names (peek_columns) has
                # them, and a clash in a column the run does not read stops nothing (the run
                # reads its columns only, and meets the clash again if it is in one of them)
                err.columns = list(dict.fromkeys(k for r in rows for k in r))
                err.clash = field.split(".")[0].split("[")[0]  # the row's key it is under
                raise err from None
        for i, r in enumerate(rows):
            huge = _beyond_int64(r, "")
            if huge:  # said as written (the line-wise reader, which reads it as a float, names it too)
                raise PacktoolInputError(f"at {row_name(i)}: field {huge[0]} is {huge[1]}, beyond int64's range "
                                         f"(-2**63..2**63-1), which no column of ids or numbers holds; fix the value",
                                         path=path) from None
        raise PacktoolInputError(f"at {row_name(0)} and on: cannot hold these rows as one table "
                                 f"({' '.join(str(e).split())}); rewrite them with one type per field",
                                 path=path) from None


def first_field(obj, test, where: str = ""):
    """(field, value) of the first value in `obj`, depth first as written, that `test` holds for:
    the field named as `lp[0]`, `meta.score` ("" for `obj` itself); None if none. The one walk of a
    row's values that names where a bad one is (an int past int64 here, a float past float64 in
    json_depth)."""
    if test(obj):
        return where, obj
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        found = first_field(v, test, f"{where}[{k}]" if isinstance(obj, list) else f"{where}.{k}" if where else k)
        if found:
            return found
    return None


def _beyond_int64(obj, where: str):
    """(field, value) of the first integer in `obj` that no int64 holds, or None."""
    return first_field(obj, lambda v: isinstance(v, int) and not isinstance(v, bool) and not -2 ** 63 <= v < 2 ** 63,
                       where)


def plain_part(where: str) -> str:
    """A plain string among content parts, in words (json_types and messages both say it)."""
    return (f'{where} is a plain string, not a content part: write it as {{"type": "text", "text": ...}} '
            f"(or flatten content to a string)")


def _refuse_odd_turns(rows: list[dict], path: str, row_name) -> None:
    """A turn list that is no list, or a turn that is no object, where other rows (or turns) hold
    the right kind: _walk names the first value of the field's first kind as the one at fault
    ("messages is a JSON array here but a number at line 1" at line 2, the good row), and its
    fix (one type per field) is not the user's. Named here where it is, by its key."""
    for key, shape in _CHAT_LISTS.items():
        values = [(i, r.get(key)) for i, r in enumerate(rows) if r.get(key) is not None]
        if len({_kind(v) for _, v in values}) > 1:
            i, v = next((i, v) for i, v in values if not isinstance(v, list))
            raise PacktoolInputError(f"at {row_name(i)}: {key} is a JSON {_kind(v)}, not a list of turn objects "
                                     f"{shape}; write the row's turns as a list, [{{...}}, ...]", path=path)
        turns = [(i, j, m) for i, v in values for j, m in enumerate(v) if m is not None]
        if len({_kind(m) for *_, m in turns}) > 1:
            i, j, m = next((i, j, m) for i, j, m in turns if not isinstance(m, dict))
            raise PacktoolInputError(f"at {row_name(i)}: {key}[{j}] is a JSON {_kind(m)}, not a turn object "
                                     f"{shape}; remove it from the list or write the turn", path=path)


def _refuse_plain_parts(rows: list[dict], path: str, row_name) -> None:
    """A plain string among content parts: beside the text parts `unite_content` made, _walk would
    call the field an object "in the same row" that the user never wrote."""
    for i, r in enumerate(rows):
        for key in (k for k in _TURN_LISTS if isinstance(r.get(k), list)):
            for j, m in enumerate(r[key]):
                parts = m.get("content") if isinstance(m, dict) else None
                k = next((k for k, b in enumerate(parts) if isinstance(b, str)), None) \
                    if isinstance(parts, list) else None
                if k is not None:
                    raise PacktoolInputError(f"at {row_name(i)}: {plain_part(f'{key}[{j}].content[{k}]')}",
                                             path=path)


def block_table(block: bytes, path: str, first_line: int, columns: list[str] | None = None) -> pa.Table:
    """A JSON Lines block (whole lines, UTF-8 and valid JSON checked) read in Python; lines count
    from 1, as every JSON Lines error says. Only `columns` (when given) are kept: a field of two
    types in a column that is not read stops nothing."""
    rows, lines = [], []
    for i, raw in enumerate(block.split(b"\n")):
        if not raw.strip():
            continue
        text = raw.decode("utf-8")
        try:
            obj = raw_decode(text, 0, whole=True)[0]
        except (DuplicateKeyError, BeyondFloat64Error) as e:  # JSON, against packtool's rule: its own words
            raise PacktoolInputError(f"at line {first_line + i + 1}: {e.msg}", path=path) from None
        except json.JSONDecodeError as e:
            raise PacktoolInputError(invalid_json(e, first_line + i + 1), path=path) from None
        if not isinstance(obj, dict):
            raise PacktoolInputError(f"at line {first_line + i + 1}: the line is a JSON {_kind(obj)}, not an "
                                     f"object; write each line as one {{...}} object", path=path)
        rows.append(obj if columns is None else {c: obj[c] for c in columns if c in obj})
        lines.append(first_line + i + 1)
    batch = rows_batch(rows, path, lambda k: f"line {lines[k]}")
    return pa.Table.from_batches([batch])

"""The keys of a chat row that its template does not render: counted per file and said in one note.

A chat row carries more than roles and text: a turn's `reasoning_content` / `thinking`,
`name`, `refusal`, `tool_call_id`; the row's `tools` and `documents` (which transformers'
`apply_chat_template` passes to the template as variables of those names; packtool does the
same). Every key reaches the template (normalize_message keeps them); one the template does not
render is content left out of the packed tokens, so it is counted here and named in a note,
never dropped without a word. `weight` is packtool's own (OpenAI's "do not train this turn").

Whether a template renders a key: the built-ins render role, content and tool_calls; a
template from a file or model folder renders a key its text names (`message.thinking`,
`message['thinking']`, `tools`). A template that names a key only to skip it still counts as
rendering it: the note is for keys nothing looks at.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa

from packtool import json_text
from packtool.errors import PacktoolInputError
from packtool.notes import note
from packtool.tokenize.blank_lines import say_record
from packtool.tokenize.messages import ROLES, check_role, no_nulls, normalize_message, sharegpt_to_messages, untrained, with_system
from packtool.tokenize.reply_roles import say_untrained
from packtool.tokenize.row_checks import has_value, turn_rows, valid_values

# Row keys beside the turns that reach the template as variables (transformers' names), and
# `system`, a row's system prompt (messages.with_system makes it the first turn).
ROW_KEYS = ("tools", "documents")
ROW_COLUMNS = ROW_KEYS + ("system",)
_BUILTIN_RENDERS = frozenset(("role", "content", "tool_calls"))
# Keys packtool reads itself: the turn's text and role, a single call (made tool_calls), weight
_READ = {"chat": frozenset(("role", "content", "tool_call", "weight")),
         "sharegpt": frozenset(("from", "value", "weight"))}


class KeyUse:
    """Which keys one template renders (see the module doc)."""

    def __init__(self, template) -> None:
        from packtool.tokenize.builtin_templates import BUILTIN
        from packtool.tokenize.templates import keys_text
        self.name = template.name
        self._builtin = BUILTIN.get(template.name) == template.text
        self._text = keys_text(template)  # without jinja comments; a named set's tool_use too
        self._seen: dict[str, bool] = {}

    def renders(self, key: str) -> bool:
        if key not in self._seen:
            self._seen[key] = (key in _BUILTIN_RENDERS if self._builtin else
                               re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", self._text) is not None)
        return self._seen[key]


def unrendered_turn_keys(col: pa.Array, kind: str, use: KeyUse) -> list[tuple[str, ...]]:
    """Per row of a batch's turn column: the keys with a value (neither null nor "") in any of
    its turns that neither packtool nor the template reads, as `messages[].thinking`, sorted.
    Read per key from the turns' Arrow struct (validity bits, string lengths): a Python scan of
    every turn's keys cost about a quarter of rendering them with chatml."""
    parts = turn_rows(col)
    if parts is None:
        return [()] * len(col)  # null turns (or none): no keys
    turns, row_of = parts
    names = [f.name for f in turns.type]
    label = "messages" if kind == "chat" else "conversations"
    keys = sorted(k for k in set(names) - _READ[kind] if kind == "sharegpt" or not use.renders(k))
    found: dict[int, list[str]] = {}
    if keys:
        live = valid_values(turns) & (row_of >= 0)  # a turn that is an object, in a row that is a list
        for k in keys:
            for r in np.unique(row_of[live & has_value(turns.field(names.index(k)))]).tolist():
                found.setdefault(r, []).append(f"{label}[].{k}")
    return [tuple(found.get(r, ())) for r in range(len(col))]


def roles_known(col: pa.Array) -> bool:
    """Whether every turn of a batch's turn column that is an object has a role of ROLES, read
    off the Arrow struct: then chat_row skips check_role's test of each turn (a tenth of a
    second per 20k chats, on the thread that renders). False sends every turn to check_role."""
    parts = turn_rows(col)
    if parts is None or "role" not in [f.name for f in parts[0].type]:
        return False
    turns, row_of = parts
    role = turns.field("role")
    if not (pa.types.is_string(role.type) or pa.types.is_large_string(role.type)):
        return False
    import pyarrow.compute as pc
    role = role.filter(pa.array(valid_values(turns) & (row_of >= 0)))
    return role.null_count == 0 and pc.all(pc.is_in(role, value_set=pa.array(ROLES))).as_py() is not False


def row_value(value, key: str, path: str, row: int):
    """A row's `tools` / `documents` as the template gets it: a list of objects. A JSON text of
    it (json_types keeps JSON rows' so; some datasets store `tools` so) is decoded; from a
    columnar file, the nulls Arrow filled in for keys of other rows are dropped."""
    if value is None:
        return None
    if isinstance(value, str):
        try:  # JSON text: exact, nothing Arrow filled in; by packtool's rule (a key twice, a long integer)
            value = json_text.loads(value)
        except json.JSONDecodeError as e:
            if json_text.past_syntax(e):
                raise PacktoolInputError(f"{key} is JSON text packtool does not read: {e.msg}", path=path,
                                         row=row) from None
            value = _NOT_JSON
    else:
        value = no_nulls(value)
    if not isinstance(value, list):
        raise PacktoolInputError(f"{key} is {_kind(value)}, not a list; give {key} as a list of "
                                 f"objects (JSON schemas for tools), as apply_chat_template takes it",
                                 path=path, row=row)
    return value


_NOT_JSON = object()


def _kind(value) -> str:
    """What a row's tools / documents hold, in JSON's words (json_types hands a JSON row's value
    over as its JSON text, so an object arrives as a string)."""
    if value is _NOT_JSON:
        return "a string that is not JSON"
    return {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def count(acc: dict, keys: list[str], row: int) -> None:
    """`acc`: key -> [rows that hold it, first such row] (JSON-ready: kept in cache.json)."""
    for k in keys:
        seen = acc.setdefault(k, [0, row])
        seen[0] += 1


def merge(acc: dict, more: dict) -> None:
    for k, (n, first) in more.items():
        seen = acc.setdefault(k, [0, first])
        seen[0] += n
        seen[1] = min(seen[1], first)


def say_unrendered(path: str, acc: dict, template_name: str | None) -> None:
    """One note per file, said on every run (a reused cache says its stored counts again)."""
    if not acc:
        return
    said = "; ".join(f"{k} ({n:,} row{'s' if n != 1 else ''}, first row {first})"
                     for k, (n, first) in sorted(acc.items()))
    note(f"{path}: chat template {template_name} does not render these keys, so their text is not "
         f"in the packed tokens: {said}; pick a template that renders them, or remove the keys "
         f"from the rows if leaving them out is meant (rows count from 0)")


def chat_row(shape, row: tuple, path: str, row_no: int, use: KeyUse, turn_keys: tuple[str, ...],
             roles_ok: bool = False):
    """One chat / ShareGPT row as the template takes it: (turns, indices of turns with weight 0,
    the row's tools / documents, the keys `use`'s template does not render: `turn_keys`, the
    row's from `unrendered_turn_keys`, and the row's own). `roles_ok`: its batch's roles_known."""
    col, raw = shape.columns[0], row[0] or []
    msgs = ([normalize_message(m, path, row_no, col, j) for j, m in enumerate(raw)]
            if shape.kind == "chat" else sharegpt_to_messages(raw, path, row_no))
    if shape.kind == "chat" and not roles_ok:  # ShareGPT's `from` is mapped to a role by name
        for j, m in enumerate(msgs):
            check_role(m, col, j, path, row_no)
    extra = dict(zip(shape.columns[1:], row[1:]))
    msgs = with_system(msgs, extra.pop("system", None), col, path, row_no)
    skip = [j for j, m in enumerate(msgs) if "weight" in m and untrained(m, col, j, path, row_no)]  # few turns have one
    row_keys = {k: row_value(v, k, path, row_no) for k, v in extra.items()}
    row_keys = {k: v for k, v in row_keys.items() if v is not None}
    left = [*turn_keys, *(k for k in row_keys if not use.renders(k))]
    return msgs, skip, row_keys, left


def say_stored(meta: dict, template) -> None:
    """A reused cache's notes (cache.json keeps each file's counts): said as when it was built,
    the blank lines a JSON Lines file held (blank_lines) too."""
    for rec in meta.get("inputs", ()):
        say_unrendered(rec["path"], rec.get("unrendered") or {}, template.name if template else None)
        say_record(rec["path"], rec.get("blank_lines"))
        say_untrained(rec["path"], rec.get("untrained"))

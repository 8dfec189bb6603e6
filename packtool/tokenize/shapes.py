"""Input shapes: how one row becomes text plus loss spans. Which columns mean what (detection,
`Shape`) is tokenize/shape_detect.py's, re-exported here. Rows are converted one record
batch at a time: this is the one place where Arrow data becomes Python objects, because
templates need them. What rows must hold first is `row_checks`'; chat turns are normalized
by `messages`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import jinja2
import pyarrow as pa

from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.tokenize.chat_keys import KeyUse, chat_row, count, roles_known, unrendered_turn_keys
from packtool.tokenize.gen_markers import MarkedValue, arrow_may_hold
from packtool.tokenize.nothing import has_value
from packtool.tokenize.reply_roles import roles_of
from packtool.tokenize.row_checks import (
    blank_fields,
    check_column_types,
    null_message,
    null_value,
    refuse_keys,
    refuse_null,
    rows_with_empty_turns,
    schema_lacks,
    turn_keys,
)
from packtool.tokenize.shape_detect import (  # noqa: F401  (re-exported: detection's callers import it from here)
    ALPACA_RESPONSE,
    HELD,
    QA,
    Shape,
    detect_shape,
    held_message,
    known_shapes,
    shape_columns,
    unread_shapes,
)
from packtool.tokenize.templates import Renderer, TemplateRefusal

ALPACA_PROMPT = ("Below is an instruction that describes a task, paired with an input that provides "
                 "further context. Write a response that appropriately completes the request.\n\n"
                 "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
ALPACA_PROMPT_NO_INPUT = ("Below is an instruction that describes a task. Write a response that "
                          "appropriately completes the request.\n\n"
                          "### Instruction:\n{instruction}\n\n### Response:\n")


def _one_response(cols: list[list], path: str, first_row: int) -> None:
    """Alpaca rows' output and response (the last of `cols`) as one column in place of output;
    a row holding both (null and "" are nothing) is refused: which one is its response is the user's call."""
    response = cols.pop()
    for i, (o, r) in enumerate(zip(cols[1], response)):
        if o not in (None, "") and r not in (None, ""):
            raise PacktoolInputError(
                "row holds both output and response, alpaca's two names for the response: packtool "
                "will not pick one; keep the one to train on and drop the other", path=path, row=first_row + i)
    cols[1] = [r if o in (None, "") and r is not None else o for o, r in zip(cols[1], response)]


def refuse_held(batch: pa.RecordBatch, shape: Shape, path: str, first_row: int) -> None:
    """A row's system prompt or history beside a prompt and its response: one line naming the
    column, its first row with a value and the fix (a chat row renders both)."""
    import pyarrow.compute as pc
    for name in shape.held:
        has = has_value(batch.column(name))
        if has is None or not pc.any(has).as_py():
            continue
        i = int(has.to_numpy(zero_copy_only=False).nonzero()[0][0])
        raise PacktoolInputError(held_message(name, shape), path=path, row=first_row + i, flag=cli_flag("shape"))


# ---------------------------------------------------------------- rows -> text + spans

@dataclass
class RenderedBatch:
    texts: list[str]
    spans: list[list[tuple[int, int]] | None]   # None: every token is a target (text shape)
    empty: list[bool]                            # no content at all (empty text / no messages)
    # chat keys the template does not render: key -> [rows, first row] (chat_keys.count)
    unrendered: dict = field(default_factory=dict)
    # chat rows rendered with no trained turn: batch row -> its turns' roles (reply_roles.py)
    no_reply: dict = field(default_factory=dict)


def _prompt_response(shape: Shape, row: tuple, separator: str | None) -> tuple[str, str]:
    if shape.kind == "alpaca":
        instruction, response = row[0] or "", row[1] or ""
        inp = row[2] if len(row) > 2 else None
        if shape.templated:
            return (instruction + "\n\n" + inp if inp else instruction), response
        prompt = (ALPACA_PROMPT.format(instruction=instruction, input=inp) if inp
                  else ALPACA_PROMPT_NO_INPUT.format(instruction=instruction))
        return prompt, response
    sep = separator if separator is not None else ("\n" if shape.kind == "fields" else "")
    prompt, response = row[0] or "", row[1] or ""
    if not shape.templated:
        prompt = prompt + sep
    return prompt, response


def refuse_other_row(batch: pa.RecordBatch, shape: Shape, path: str, row: int, i: int) -> None:
    """A row with none of its shape's columns but values in others is a row of another shape
    (a `{"text": ...}` row in a chat file), not an empty example: --on-empty skip would drop
    real data, so it is named with the flag that reads it."""
    held = [n for n in batch.schema.names if n not in shape.columns and batch.column(n)[i].is_valid]
    if not held:
        return
    found = known_shapes(set(held))
    other = found[0][0] if found else None
    flags = (f"{arg('prompt_field', 'question')} {arg('response_field', 'answer')}" if other == "fields"
             else arg("shape", other))
    fix = (f"put such rows in a file of their own and pack it with {flags} (or convert them to "
           f"{', '.join(shape.columns)})" if other else
           f"convert them to {', '.join(shape.columns)} or drop them")
    raise PacktoolInputError(
        f"row has no {' or '.join(shape.columns)} but holds {', '.join(held)}: a "
        f"{other + ' ' if other else ''}row in a {shape.kind} file, not an empty example "
        f"({arg('on_empty', 'skip')} would drop it); {fix}", path=path, row=row)


def _source_place(where: str, shape: Shape, added: int) -> str:
    """A value's place as the template got it (`messages[2].content`) as the row holds it: a
    ShareGPT turn's `conversations[1].value`, a `system` column's prompt (`added`: 1 when it is
    the first turn), a two-field row's column."""
    head, sep, rest = where.partition("]")
    if not head.startswith("messages[") or not sep:
        return where
    j = int(head[len("messages["):]) - added
    if j < 0:
        return "system" + rest.removeprefix(".content")
    if shape.kind == "sharegpt":
        return f"{shape.columns[0]}[{j}].value" + ("" if rest.startswith((".content", ".tool_calls")) else rest)
    if shape.kind != "chat":  # a two-field row made a user turn and an assistant turn
        if rest != ".content":
            return where
        return (f"the prompt ({shape.columns[0]}{' or input' if 'input' in shape.columns else ''})" if j == 0
                else f"the response ({shape.columns[1]})")
    return f"{shape.columns[0]}[{j}]{rest}"


def _rendered_nothing(template, turns: int, path: str, row: int) -> None:
    """A template that renders a row of turns as nothing (an empty file, one looping over another
    variable than `messages`) was "empty example: messages ... holds no turns; drop the row": the
    user sent to the data, and --on-empty skip dropped every templated row as empty (S47A-4)."""
    why = ("the template is empty" if not template.text.strip() else
           "the template writes nothing for these turns (a loop over another variable than `messages`?)")
    raise PacktoolInputError(f"chat template {template.name} rendered nothing for this row ({turns} turn"
                             f"{'s' if turns != 1 else ''}): {why}; fix the template, or pass another "
                             f"{arg('chat_template')}", path=path, row=row, flag=cli_flag("chat_template"))


def render_batch(batch: pa.RecordBatch, shape: Shape, renderer: Renderer | None,
                 separator: str | None, path: str, first_row: int,
                 skip_null: bool = False) -> RenderedBatch:
    """Rows -> text + loss spans. A null prompt, response or chat turn is an error naming the
    row, or (`skip_null`, from --on-empty skip) an empty row that the pipeline skips and counts."""
    if shape.held:
        refuse_held(batch, shape, path, first_row)
        shape = replace(shape, columns=shape.columns[:-len(shape.held)], held=())
    check_column_types(batch, shape, path, first_row)
    cols = [batch.column(c).to_pylist() for c in shape.columns]
    names = list(shape.columns)
    if shape.kind == "alpaca" and ALPACA_RESPONSE[1] in shape.columns[2:]:
        _one_response(cols, path, first_row)
        names[1] = "output (or response)"
    msg_key = {"chat": "content", "sharegpt": "value"}.get(shape.kind)
    no_key = msg_key is not None and schema_lacks(batch.column(shape.columns[0]), msg_key)
    texts: list[str] = []
    spans: list[list[tuple[int, int]] | None] = []
    empty: list[bool] = []
    use = KeyUse(renderer.template) if renderer is not None and msg_key else None
    keys_of = unrendered_turn_keys(batch.column(shape.columns[0]), shape.kind, use) if use else None
    roles_ok = shape.kind == "chat" and roles_known(batch.column(shape.columns[0]))
    if msg_key:
        maybe_empty = rows_with_empty_turns(batch.column(shape.columns[0]), shape.kind)
        maybe_empty = [True] * batch.num_rows if maybe_empty is None else maybe_empty.tolist()
    unrendered: dict = {}
    no_reply: dict = {}
    unmarked = renderer is not None and not arrow_may_hold([batch.column(c) for c in shape.columns])
    for i, row in enumerate(zip(*cols)):
        null: list[str] = []
        if all(v is None for v in (row[:1] if msg_key else row)):  # a row's tools alone are no turns
            refuse_other_row(batch, shape, path, first_row + i, i)
        if shape.kind in ("chat", "sharegpt"):
            key = "content" if shape.kind == "chat" else "value"
            is_null = null_message if shape.kind == "chat" else null_value
            bad = [j for j, m in enumerate(row[0] or []) if is_null(m)] if maybe_empty[i] else ()
            if bad:
                null = [f"{shape.columns[0]}[{bad[0]}].{key}"]
                keys = turn_keys(row[0], bad[0])
                if set(keys) - {"role", "from", "name"}:  # its text is under another key
                    if no_key or not skip_null:
                        refuse_keys(shape.columns[0], bad[0], keys, key, path, first_row + i, no_key)
        elif shape.kind != "text":
            null = blank_fields(row, names)
        if null:
            if not skip_null:
                refuse_null(null, path, first_row + i, turn=msg_key is not None or shape.templated)
            texts.append("")
            spans.append([])
            empty.append(True)
            continue
        if shape.kind == "text":
            text = row[0] or ""
            texts.append(text)
            spans.append(None)
            empty.append(not text.strip())
            continue
        skip, row_keys = (), None
        if shape.kind in ("chat", "sharegpt"):
            msgs, skip, row_keys, left = chat_row(shape, row, path, first_row + i, use, keys_of[i], roles_ok)
            count(unrendered, left, first_row + i)
        else:
            prompt, response = _prompt_response(shape, row, separator)
            if not shape.templated:
                texts.append(prompt + response)
                spans.append([(len(prompt), len(prompt) + len(response))] if response else [])
                empty.append(not (prompt + response).strip())
                continue
            msgs = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
        if not msgs:
            texts.append("")
            spans.append([])
            empty.append(True)
            continue
        try:
            text, sp = renderer.render(msgs, skip, row_keys, unmarked)
        except MarkedValue as e:  # the row's data, not the template: no --chat-template to blame
            e.where = _source_place(e.where, shape, len(msgs) - len(row[0] or []) if msg_key else 0)
            raise PacktoolInputError(e.text(), path=path, row=first_row + i) from None
        except TemplateRefusal as e:
            raise PacktoolInputError(f"chat template {renderer.template.name} refuses the row: {e}; fix the row, "
                                     f"or pick a template that takes it ({arg('chat_template')})",
                                     path=path, row=first_row + i) from None
        except (jinja2.TemplateError, TypeError) as e:
            raise PacktoolInputError(f"chat template {renderer.template.name} failed: {e}",
                                     path=path, row=first_row + i, flag=cli_flag("chat_template")) from None
        if not text.strip():  # the row has turns: nothing rendered is the template's doing, not the row's
            _rendered_nothing(renderer.template, len(msgs), path, first_row + i)
        texts.append(text)
        spans.append(sp)
        empty.append(False)
        if not sp and shape.kind == "chat":  # no loss token: the refusal or the skip names its roles
            no_reply[i] = roles_of(msgs)
    return RenderedBatch(texts, spans, empty, unrendered, no_reply)

"""Input shapes: which columns mean what, and how one row becomes text plus loss spans.

Detection looks at a file's column names (per file, so one run can mix GSM8K, chats and
documents); `TokenizeConfig.shape` overrides it for every file. Rows are converted one record
batch at a time: this is the one place where Arrow data becomes Python objects, because
templates need them. What rows must hold first is `row_checks`'; chat turns are normalized
by `messages`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import jinja2
import pyarrow as pa

from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.tokenize.chat_keys import ROW_COLUMNS, KeyUse, chat_row, count, unrendered_turn_keys
from packtool.tokenize.row_checks import (
    check_column_types,
    null_message,
    null_value,
    refuse_keys,
    refuse_null,
    rows_with_empty_turns,
    schema_lacks,
    turn_keys,
)
from packtool.tokenize.templates import Renderer

ALPACA_PROMPT = ("Below is an instruction that describes a task, paired with an input that provides "
                 "further context. Write a response that appropriately completes the request.\n\n"
                 "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
ALPACA_PROMPT_NO_INPUT = ("Below is an instruction that describes a task. Write a response that "
                          "appropriately completes the request.\n\n"
                          "### Instruction:\n{instruction}\n\n### Response:\n")


def _fix() -> str:
    return (f"{arg('shape', choices=('tokens', 'text', 'chat', 'sharegpt', 'alpaca', 'prompt_completion', 'fields'))}, "
            f"{arg('text_field', 'NAME')}, or {arg('prompt_field', 'A')} {arg('response_field', 'B')}")


@dataclass(frozen=True)
class Shape:
    kind: str                        # tokens | text | chat | sharegpt | alpaca | prompt_completion | fields
    columns: tuple[str, ...]         # the columns this shape reads, in a fixed role order
    templated: bool = False          # rendered through a chat template
    side: tuple[str, ...] = ()       # per-token side columns read beside (tokens only)
    held: tuple[str, ...] = ()       # content columns read only to refuse (the last of `columns`)


def _need(cols: set[str], names: tuple[str, ...], kind: str, path: str, found: list[str]) -> None:
    missing = [n for n in names if n not in cols]
    if missing:
        raise PacktoolInputError(
            f"shape {kind} needs column(s) {', '.join(missing)}; columns found: {', '.join(found) or 'none'}; "
            f"fix with {_fix()}", path=path, flag=cli_flag("shape"))


def _need_side(cols: set[str], side: tuple[str, ...], path: str, found: list[str], cfg) -> None:
    """A side column the file lacks is a --side-columns (or --support-columns) name to check,
    not a shape problem."""
    missing = [n for n in side if n not in cols]
    if missing:
        from packtool.tokenize.side_values import parse_side_spec
        named = {s[0] for s in parse_side_spec(getattr(cfg, "side_columns", ()) or (), ())}
        name = "side_columns" if set(missing) & named else "support_columns"
        raise PacktoolInputError(
            f"side column(s) {', '.join(missing)} not in this file (columns found: {', '.join(found) or 'none'}); "
            f"check the names given to {arg(name)}", path=path, flag=cli_flag(name))


def _side_names(cfg) -> tuple[str, ...]:
    spec = getattr(cfg, "side_columns", ()) or getattr(cfg, "support_columns", ())
    if not spec:
        return ()
    from packtool.tokenize.side_values import parse_side_spec
    return tuple(s[0] for s in parse_side_spec(cfg.side_columns, cfg.support_columns))


# Columns only a packed slab has (FORMAT.md): spelled here, as the tokenize stage comes before
# the slab format's module and must not import it.
_SLAB_COLUMNS = frozenset(("input_ids", "seq_lens", "cu_seqlens_padded", "slab_index"))


QA = {"question", "answer"}  # GSM8K's fields (docs/TOKENIZATION.md's own example of `fields`)
_ROW_IDS = {"id", "idx", "index", "uid"}  # columns beside them that say nothing of the prompt


def _question_answer(cols: set[str], path: str) -> tuple[str, str]:
    """question -> answer as a prompt and its response, when nothing else could be part of the
    prompt (a passage, a context, choices): then which columns the prompt needs is the user's
    call, said in one line with the flags."""
    other = sorted(cols - QA - _ROW_IDS - set(HELD))  # system / history: refused by row (`refuse_held`)
    if other:
        raise PacktoolInputError(
            f"has question and answer columns beside {', '.join(other)}, which may belong to the prompt: "
            f"pass {arg('prompt_field', 'question')} {arg('response_field', 'answer')} to pack question -> "
            f"answer (the others are not read), or give {arg('shape')} / {arg('text_field')} for another layout",
            path=path, flag=cli_flag("prompt_field"))
    return "question", "answer"


# LLaMA-Factory's alpaca columns beyond instruction/input/output (its dataset_info `system`,
# `history`): a system prompt and earlier [instruction, response] turns, content a prompt/response
# row does not render. Read beside alpaca, prompt/completion and question/answer rows alike and
# refused where a row holds a value, so they are never dropped without a word.
HELD = {"system": "a system prompt", "history": "earlier [instruction, response] turns"}
# Alpaca's response under either documented name: a file may hold both (two exports joined), each
# row's response under one of them; a row is read from the one that holds it, never called empty.
ALPACA_RESPONSE = ("output", "response")


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


def _with_held(shape: Shape, cols: set[str]) -> Shape:
    held = tuple(c for c in HELD if c in cols and c not in shape.columns)
    return replace(shape, columns=shape.columns + held, held=held) if held else shape


def _has_value(col: pa.Array) -> pa.Array | None:
    """Which rows hold something: null, "" and [] are nothing to render (LLaMA-Factory's own
    empty system / history); any other value (a number, an object) is content."""
    import pyarrow.compute as pc  # here: a pack of other shapes never loads it (25 ms)
    t = col.type
    if pa.types.is_null(t):
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.fill_null(pc.greater(pc.utf8_length(col), 0), False)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pc.fill_null(pc.greater(pc.list_value_length(col), 0), False)
    return col.is_valid()


def refuse_held(batch: pa.RecordBatch, shape: Shape, path: str, first_row: int) -> None:
    """A row's system prompt or history beside a prompt and its response: one line naming the
    column, its first row with a value and the fix (a chat row renders both)."""
    import pyarrow.compute as pc
    for name in shape.held:
        has = _has_value(batch.column(name))
        if has is None or not pc.any(has).as_py():
            continue
        i = int(has.to_numpy(zero_copy_only=False).nonzero()[0][0])
        raise PacktoolInputError(
            f"column {name} holds {HELD[name]}, which {shape.kind} rows ({', '.join(shape.columns[:2])}) "
            f"do not render: convert the rows to chat messages (system turn first, each history pair "
            f"as user/assistant turns before the prompt) and pack them with {arg('shape', 'chat')}, or "
            f"drop the column to pack without it", path=path, row=first_row + i, flag=cli_flag("shape"))


def known_shapes(cols: set[str], text_field: str = "text",
                 empty: frozenset[str] = frozenset()) -> list[tuple[str, tuple[str, ...]]]:
    """Every known shape whose columns are all in `cols`, as (kind, its columns), in auto
    detection's order (docs/TOKENIZATION.md). A shape whose every column is in `empty` (null on
    every row of the file: `shape_columns_without_values`) is no evidence of that shape."""
    resp = "output" if "output" in cols else "response"
    found = [("tokens", ("input_ids",)), ("chat", ("messages",)), ("sharegpt", ("conversations",)),
             ("alpaca", ("instruction", resp)), ("prompt_completion", ("prompt", "completion")),
             ("text", (text_field,)), ("fields", ("question", "answer"))]
    return [(k, c) for k, c in found if set(c) <= cols and not set(c) <= empty]


def shape_columns(cols: set[str], text_field: str = "text") -> set[str]:
    """The columns of the known shapes a file has more than one of: the ones whose values
    decide (`known_shapes`' empty) whether each is evidence or a column null everywhere."""
    found = known_shapes(cols, text_field)
    return {c for _, cs in found for c in cs} if len(found) > 1 else set()


def _choose(kind: str, cols: tuple[str, ...]) -> str:
    """The argument that picks this shape, as the caller spells it (--shape text / shape='text')."""
    if kind == "fields":
        return f"{arg('prompt_field', cols[0])} {arg('response_field', cols[1])}"
    return arg("shape", kind)


def _refuse_two_shapes(found: list, path: str) -> None:
    """Columns of two known shapes in one file (text beside question/answer): packing one by
    precedence dropped the other's content without a word, so the user picks."""
    said = " and ".join(f"{k} ({', '.join(c)})" for k, c in found)
    raise PacktoolInputError(
        f"has the columns of {len(found)} input shapes, {said}: packtool will not guess which one to "
        f"pack; pick one with {' or '.join(_choose(k, c) for k, c in found)} (the other columns are "
        f"then not read), or, if each row holds only one of them, split the file by shape",
        path=path, flag=arg("shape"))


def unread_shapes(columns: list[str], shape: Shape, cfg,
                  empty: frozenset[str] = frozenset()) -> list[tuple[str, tuple[str, ...]]]:
    """The other known shapes' columns in a file packed as `shape` (chosen explicitly: auto
    refuses such a file): said in a note, as they are not read (columns null on every row,
    `empty`, hold nothing to leave out)."""
    return [(k, c) for k, c in known_shapes(set(columns), cfg.text_field or "text", empty)
            if not set(c) & set(shape.columns)]


def _auto_kind(columns: list[str], cfg, path: str, empty: frozenset[str]) -> tuple[str, tuple]:
    """Auto detection: the one known shape whose columns the file has; an explicit choice of
    columns (the prompt/response or text field, side columns) picks among several."""
    cols, text_field = set(columns), cfg.text_field or "text"
    pair = (cfg.prompt_field, cfg.response_field)
    if cfg.prompt_field and cfg.prompt_field in cols and cfg.response_field in cols:
        return "fields", pair
    if cfg.text_field and cfg.text_field in cols:
        return "text", pair
    if _side_names(cfg) and "input_ids" in cols:
        return "tokens", pair
    found = known_shapes(cols, text_field, empty) or known_shapes(cols, text_field)
    if len(found) > 1:
        _refuse_two_shapes(found, path)
    if not found:
        raise PacktoolInputError(
            f"cannot tell the input shape from columns {', '.join(columns) or 'none'}; "
            f"fix with {_fix()}", path=path, flag=cli_flag("shape"))
    kind = found[0][0]
    return kind, (_question_answer(cols - empty, path) if kind == "fields" else pair)


def detect_shape(columns: list[str], cfg, path: str, has_template: bool,
                 empty: frozenset[str] = frozenset()) -> Shape:
    """Pick the shape for one file. Explicit cfg.shape wins; auto takes the one shape whose
    columns the file has, not counting a shape whose columns are null on every row (`empty`)."""
    cols = set(columns)
    if _SLAB_COLUMNS <= cols:  # each slab would become one sequence: its rows merged, its pads trained on
        raise PacktoolInputError(
            "is a packtool slab shard (a packed output), not training rows: packing it again would make "
            "each slab one sequence and train on its pads; pack the inputs it was made from (its "
            ".manifest.json lists them) with the new flags", path=path)
    text_field = cfg.text_field or "text"
    kind = cfg.shape
    pair = (cfg.prompt_field, cfg.response_field)
    if kind == "auto":
        kind, pair = _auto_kind(columns, cfg, path, empty)
    side = _side_names(cfg)
    if side and kind != "tokens":
        raise PacktoolInputError(f"side columns ({', '.join(side)}) come with pre-tokenized rows (input_ids); "
                                 f"this input is shape {kind}", path=path, flag=cli_flag("side_columns"))
    if kind == "tokens":
        _need(cols, ("input_ids",), kind, path, columns)
        _need_side(cols, side, path, columns, cfg)
        extra = tuple(c for c in ("loss_mask", "labels") if c in cols)[:1]
        # read to be checked: its zeros are padding that must not be packed (token_rows)
        attn = ("attention_mask",) if "attention_mask" in cols else ()
        return Shape(kind, ("input_ids",) + extra + attn, side=side)
    if kind == "text":
        _need(cols, (text_field,), kind, path, columns)
        return Shape(kind, (text_field,))
    if kind in ("chat", "sharegpt"):
        col = "messages" if kind == "chat" else "conversations"
        _need(cols, (col,), kind, path, columns)
        if not has_template:
            raise PacktoolInputError(
                f"{kind} rows need a chat template; pass "
                f"{arg('chat_template', choices=('chatml', 'llama3', 'mistral', 'FILE.jinja'))} or a tokenizer "
                "folder that has one (tokenizer_config.json's chat_template, chat_template.jinja or "
                "additional_chat_templates/)", path=path, flag=cli_flag("chat_template"))
        # tools / documents go to the template as transformers passes them, system first (chat_keys)
        return Shape(kind, (col,) + tuple(k for k in ROW_COLUMNS if k in cols), templated=True)
    if kind == "alpaca":  # both response names: the second is read last, for rows without the first
        resp = tuple(c for c in ALPACA_RESPONSE if c in cols) or ALPACA_RESPONSE[1:]
        _need(cols, ("instruction", resp[0]), kind, path, columns)
        return _with_held(Shape(kind, ("instruction", resp[0]) + (("input",) if "input" in cols else ())
                                + resp[1:], has_template), cols)
    if kind == "prompt_completion":
        _need(cols, ("prompt", "completion"), kind, path, columns)
        return _with_held(Shape(kind, ("prompt", "completion"), has_template), cols)
    if kind == "fields":
        if not pair[0]:
            raise PacktoolInputError(f"shape fields needs {arg('prompt_field')} and {arg('response_field')}",
                                     path=path, flag=cli_flag("prompt_field"))
        _need(cols, pair, kind, path, columns)
        return _with_held(Shape(kind, pair, has_template), cols)
    raise PacktoolInputError(f"unknown {arg('shape', kind)}", flag=cli_flag("shape"))


# ---------------------------------------------------------------- rows -> text + spans

@dataclass
class RenderedBatch:
    texts: list[str]
    spans: list[list[tuple[int, int]] | None]   # None: every token is a target (text shape)
    empty: list[bool]                            # no content at all (empty text / no messages)
    # chat keys the template does not render: key -> [rows, first row] (chat_keys.count)
    unrendered: dict = field(default_factory=dict)


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
    if msg_key:
        maybe_empty = rows_with_empty_turns(batch.column(shape.columns[0]), shape.kind)
        maybe_empty = [True] * batch.num_rows if maybe_empty is None else maybe_empty.tolist()
    unrendered: dict = {}
    for i, row in enumerate(zip(*cols)):
        null = None
        if all(v is None for v in (row[:1] if msg_key else row)):  # a row's tools alone are no turns
            refuse_other_row(batch, shape, path, first_row + i, i)
        if shape.kind in ("chat", "sharegpt"):
            key = "content" if shape.kind == "chat" else "value"
            is_null = null_message if shape.kind == "chat" else null_value
            bad = [j for j, m in enumerate(row[0] or []) if is_null(m)] if maybe_empty[i] else ()
            if bad:
                null = f"{shape.columns[0]}[{bad[0]}].{key}"
                keys = turn_keys(row[0], bad[0])
                if set(keys) - {"role", "from", "name"}:  # its text is under another key
                    if no_key or not skip_null:
                        refuse_keys(shape.columns[0], bad[0], keys, key, path, first_row + i, no_key)
        elif shape.kind != "text":
            nulls = [names[j] for j in (0, 1) if row[j] is None]
            null = nulls[0] if nulls else None
        if null is not None:
            if not skip_null:
                refuse_null(null, path, first_row + i)
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
            msgs, skip, row_keys, left = chat_row(shape, row, path, first_row + i, use, keys_of[i])
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
            text, sp = renderer.render(msgs, skip, row_keys)
        except (jinja2.TemplateError, TypeError) as e:
            raise PacktoolInputError(f"chat template {renderer.template.name} failed: {e}",
                                     path=path, row=first_row + i, flag=cli_flag("chat_template")) from None
        texts.append(text)
        spans.append(sp)
        empty.append(not text.strip())
    return RenderedBatch(texts, spans, empty, unrendered)

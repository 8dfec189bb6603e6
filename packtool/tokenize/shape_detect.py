"""Input shape detection: which columns of a file mean what (tokenize.shapes, which turns each
row into text plus loss spans, re-exports it).

Per file, from its column names, so one run can mix GSM8K, chats and documents;
`TokenizeConfig.shape` overrides it for every file, and an explicit choice of columns (the
prompt/response or text field, side columns) picks among several. A file with the columns of
two known shapes, or of none, or a packed slab shard, is refused in one line naming the flags
that say which; a shape's missing column names the flag that fixes it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.tokenize.chat_keys import ROW_COLUMNS
from packtool.tokenize.read_checks import one_record


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
    # a JSON file's columns the shape was told from, and those of them null on every row: its
    # later rows are held to them as they are read (late_columns); () for a file with a schema
    told_from: tuple[str, ...] = ()
    told_empty: tuple[str, ...] = ()


# A pre-tokenized row's columns that say which tokens are targets, in the order read (the first
# given is the loss, the others are held to it): packtool's own; the same 0/1 mask under the names
# the user's toolchain gives it (transformers' apply_chat_template(return_assistant_tokens_mask=True)
# and TRL's assistant_only_loss: assistant_masks; TRL's tokenized prompt-completion rows:
# completion_mask), passed over, they left every prompt token a target (S47A-6); Hugging Face labels.
LOSS_COLUMNS = ("loss_mask", "assistant_masks", "completion_mask", "labels")
# mask-named columns whose meaning is known and is no loss (padding is checked in token_rows)
_NOT_LOSS_MASKS = frozenset(("attention_mask", "special_tokens_mask"))


def _refuse_unread_masks(columns: list[str], side: tuple[str, ...], empty: frozenset[str], path: str) -> None:
    """A per-token mask under a name no rule reads (`mask`, `response_mask`, `action_mask`) says
    which tokens count, and whether its 1s are targets or prompt is not packtool's to guess:
    passed over, every token would be a target without a word."""
    for c in columns:
        if (c.lower().endswith(("mask", "masks")) and c not in LOSS_COLUMNS and c not in _NOT_LOSS_MASKS
                and c not in side and c not in empty):
            raise PacktoolInputError(
                f"column {c} looks like a per-token mask, which packtool does not read under that name (its loss "
                f"columns: {', '.join(LOSS_COLUMNS)}): if its 1s mark the tokens to train on, rename it loss_mask; "
                f"to carry it beside the tokens, name it in {arg('side_columns')}; otherwise drop the column",
                path=path, flag=cli_flag("side_columns"))


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _headerless(path: str, columns: list[str], example: str = "text, or prompt,completion") -> None:
    """A CSV/TSV's column names are its first line: one with a number or nothing where a name goes
    is data (a file written without a header row), and a shape error naming "columns 4, What is
    2+2?" sent the user to --shape; its first row would be lost as the header anyway."""
    from packtool.tokenize.csv_reader import CSV_EXT
    if path.lower().endswith(CSV_EXT) and any(not c.strip() or _NUMBER.fullmatch(c.strip()) for c in columns):
        raise PacktoolInputError(
            f"its first line ({', '.join(columns)}) reads as data, not column names (a number or nothing where "
            f"a name goes): a CSV/TSV's first line is its header row; add a header line naming the columns "
            f"(e.g. {example}), or convert the file to JSON Lines", path=path)


# every column a known shape reads (known_shapes), the default text field's included
_SHAPE_COLUMNS = {"input_ids", "messages", "conversations", "instruction", "output", "response", "prompt",
                  "completion", "text", "question", "answer"}


def _record(path: str, columns: list[str]) -> None:
    """A .json file that is one object holding no shape's column is likelier another tool's record
    met among the data (a downloader's cache.json beside data/) than a row: said so, with both
    fixes (read_checks.one_record), where the shape's fix alone did not fit it."""
    if _SHAPE_COLUMNS & set(columns):
        return
    said = one_record(path, f"fix with {_fix()}")
    if said is not None:
        raise said


def _csv_hint(path: str) -> str:
    from packtool.tokenize.csv_reader import CSV_EXT
    return (" (a CSV/TSV's first line names its columns: if that line is data, add a header line naming them, "
            "e.g. text, or prompt,completion)") if path.lower().endswith(CSV_EXT) else ""


def _need(cols: set[str], names: tuple[str, ...], kind: str, path: str, found: list[str]) -> None:
    missing = [n for n in names if n not in cols]
    if missing:
        _headerless(path, found, ",".join(names))
        _record(path, found)
        raise PacktoolInputError(
            f"shape {kind} needs column(s) {', '.join(missing)}; columns found: {', '.join(found) or 'none'}"
            f"{_csv_hint(path)}; fix with {_fix()}", path=path, flag=cli_flag("shape"))


def _need_side(cols: set[str], side: tuple[str, ...], path: str, found: list[str], cfg) -> None:
    """A side column the file lacks is a --side-columns (or --support-columns) name to check,
    not a shape problem."""
    missing = [n for n in side if n not in cols]
    if missing:
        from packtool.side import parse_side_spec
        named = {s[0] for s in parse_side_spec(getattr(cfg, "side_columns", ()) or (), ())}
        name = "side_columns" if set(missing) & named else "support_columns"
        raise PacktoolInputError(
            f"side column(s) {', '.join(missing)} not in this file (columns found: {', '.join(found) or 'none'}); "
            f"check the names given to {arg(name)}", path=path, flag=cli_flag(name))


def _side_names(cfg) -> tuple[str, ...]:
    spec = getattr(cfg, "side_columns", ()) or getattr(cfg, "support_columns", ())
    if not spec:
        return ()
    from packtool.side import parse_side_spec
    return tuple(s[0] for s in parse_side_spec(cfg.side_columns, cfg.support_columns))


# Columns only a packed slab has (FORMAT.md): spelled here, as the tokenize stage comes before
# the slab format's module and must not import it.
_SLAB_COLUMNS = frozenset(("input_ids", "seq_lens", "cu_seqlens_padded", "slab_index"))
# and those of a plan file (`packtool plan --output`, planning.plan_file: its test holds the two
# lists together), met among the inputs where a user put it beside the data
PLAN_COLUMNS = frozenset(("slab", "dp_rank", "step", "source_index", "chunk_index", "source_offset", "length",
                          "padded", "start"))


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


def held_message(name: str, shape: Shape) -> str:
    """Why a row's `name` (a HELD column) holding a value is refused beside `shape`'s rows."""
    return (f"column {name} holds {HELD[name]}, which {shape.kind} rows ({', '.join(shape.columns[:2])}) "
            f"do not render: convert the rows to chat messages (system turn first, each history pair "
            f"as user/assistant turns before the prompt) and pack them with {arg('shape', 'chat')}, or "
            f"drop the column to pack without it")


def _with_held(shape: Shape, cols: set[str]) -> Shape:
    held = tuple(c for c in HELD if c in cols and c not in shape.columns)
    return replace(shape, columns=shape.columns + held, held=held) if held else shape


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
        _headerless(path, columns)
        _record(path, columns)
        raise PacktoolInputError(
            f"cannot tell the input shape from columns {', '.join(columns) or 'none'}{_csv_hint(path)}; "
            f"fix with {_fix()}", path=path, flag=cli_flag("shape"))
    kind = found[0][0]
    if kind == "fields" and (cfg.prompt_field or cfg.response_field):
        _refuse_other_pair(cfg, cols, columns, path)
    return kind, (_question_answer(cols - empty, path) if kind == "fields" else pair)


def _refuse_other_pair(cfg, cols: set[str], columns: list[str], path: str) -> None:
    """The user named the prompt/response columns and the file has question/answer instead:
    packing those would train on columns no flag named (S43-11: `--response-field nope` packed
    question -> answer without a word)."""
    named = [("prompt_field", cfg.prompt_field), ("response_field", cfg.response_field)]
    absent = [(k, v) for k, v in named if v is not None and v not in cols]
    said = ", ".join(arg(k, v) for k, v in absent)
    raise PacktoolInputError(
        f"{said}: no such column here (columns: {', '.join(columns)}); name the columns the prompt and the response "
        f"are in, e.g. {arg('prompt_field', 'question')} {arg('response_field', 'answer')}",
        path=path, flag=cli_flag(absent[0][0]))


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
    if PLAN_COLUMNS <= cols:  # read as rows it was "cannot tell the input shape ... --shape" (S49A-3)
        raise PacktoolInputError(
            "is a packtool plan file (`packtool plan --output`), not training rows: look at it with "
            "`packtool inspect --plan`, and pack the data it was planned for, leaving it out", path=path)
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
        # every loss source given: token_rows holds them to each other (S44-1), as reading one by
        # precedence dropped the other's content without a word
        extra = tuple(c for c in LOSS_COLUMNS if c in cols)
        _refuse_unread_masks(columns, side, empty, path)
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

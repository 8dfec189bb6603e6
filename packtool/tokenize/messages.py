"""Chat turns as a template takes them: OpenAI messages normalized (absent keys dropped, text
content parts joined, tool calls checked and wrapped) and ShareGPT turns made messages. A turn
that cannot be one is named here, before a template fails on it with jinja's words.
"""
from __future__ import annotations

import json

from packtool import json_text
from packtool.errors import PacktoolInputError
from packtool.tokenize.json_types import ARGUMENTS, plain_part

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "system": "system", "tool": "tool",
                   "observation": "tool", "function_response": "tool", "function_call": "assistant"}


# the roles packtool's templates render, and the spellings of them a dataset uses instead: each
# such turn was rendered as context under a role no template knows, never trained, and the row
# called "no assistant tokens to train on" -- which --on-empty skip then dropped (S40-8)
ROLES = ("system", "user", "assistant", "tool")
_MEANT = {**{k: v for k, v in _SHAREGPT_ROLES.items() if k != "function_call"},
          "model": "assistant", "bot": "assistant", "ai": "assistant", "gemini": "assistant",
          "claude": "assistant", "chatbot": "assistant", "agent": "assistant", "answer": "assistant",
          "response": "assistant", "question": "user", "prompt": "user", "sys": "system"}


def check_role(m: dict, column: str, j: int, path: str | None, row: int | None) -> None:
    """A turn's role is a string, and not a spelling of one of ROLES (a case, a space, another
    dataset's name for it): those are named with the role meant. A role of no known meaning
    (developer, narrator) goes to the template as given: a template may render it."""
    role = m.get("role")
    if role in ROLES:
        return
    if not isinstance(role, str):
        got = "missing" if role is None else f"{type(role).__name__} {role!r}"
        raise PacktoolInputError(f"{column}[{j}].role is {got}, not a role name; give each turn a role: "
                                 f"{', '.join(ROLES)}", path=path, row=row)
    meant = _MEANT.get(role.strip().lower())
    if meant is not None:
        raise PacktoolInputError(f"{column}[{j}].role is {role!r}, not a role packtool knows (the roles are "
                                 f"{', '.join(ROLES)}; case and spaces matter): the turn would be rendered as "
                                 f"context{' and never trained' if meant == 'assistant' else ''}; rename it "
                                 f"{meant!r}", path=path, row=row)


def _content_text(content, where: str, path: str | None, row: int | None) -> str | None:
    """OpenAI content parts joined: the text ones. A part of another kind (image_url,
    input_audio, file...) is refused, never dropped without a word (docs/TOKENIZATION.md)."""
    if not isinstance(content, list):
        return content
    for k, b in enumerate(content):
        if isinstance(b, str):
            raise PacktoolInputError(plain_part(f"{where}.content[{k}]"), path=path, row=row)
    other = [b.get("type") if isinstance(b, dict) else type(b).__name__ for b in content
             if not text_part(b)]
    if other:
        kinds = ", ".join(sorted({str(k) for k in other}))
        beside = " beside its text" if len(other) < len(content) else ""
        raise PacktoolInputError(
            f"{where}.content has {len(other)} non-text part(s) ({kinds}){beside}: packtool "
            f"tokenizes text only and does not drop them silently; keep only the "
            f'{{"type": "text"}} parts (or flatten content to a string) before packing',
            path=path, row=row)
    return "".join(b.get("text") or "" for b in content)


def text_part(b) -> bool:
    """A text content part: "type" "text", or none. A null type is an absent one: Arrow unites the
    keys of every part of a batch, so an untyped part beside typed ones comes back with type None."""
    return isinstance(b, dict) and (b.get("type") or "text") == "text"


def no_nulls(v):
    """`v` less the null-valued keys at any depth: in an Arrow struct an absent key is a null
    (the union of every row's keys), never the user's."""
    if isinstance(v, dict):
        return {k: no_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [no_nulls(x) for x in v]
    return v


def _tool_calls(calls, column: str, j: int | None, path: str | None, row: int | None,
                suffix: str = "") -> list[dict]:
    """OpenAI `tool_calls`: a list of {"type": "function", "function": {"name": str,
    "arguments": str or object}} (a bare {name, arguments} is wrapped). Any other shape is
    named here (as turn_name(column, j) + suffix), before a template turns it into "Object of
    type Undefined..."."""
    shape = ('a list of {"type": "function", "function": {"name": "...", "arguments": ...}} '
             '(OpenAI tool_calls)')
    if not isinstance(calls, (list, tuple)):
        raise PacktoolInputError(f"{turn_name(column, j)}{suffix}.tool_calls is {type(calls).__name__}, "
                                 f"not {shape}", path=path, row=row)
    out = []
    for k, c in enumerate(calls):
        # A null `function` is an absent one: Arrow unites the keys of a batch's calls, so a bare
        # {name, arguments} beside wrapped calls comes back with function None (and they with
        # name and arguments None, dropped below).
        wrapped = isinstance(c, dict) and c.get("function") is not None
        fn = c["function"] if wrapped else c if isinstance(c, dict) else None
        if not isinstance(fn, dict):
            fn = None
        elif None in fn.values() or isinstance(fn.get("arguments"), dict):  # else kept as given: no copy
            fn = {a: v for a, v in fn.items() if v is not None}
        if fn is not None and isinstance(fn.get("arguments"), dict):
            args = fn["arguments"]  # its JSON text (json_types), or nulls Arrow filled in (Parquet)
            fn["arguments"] = json_text.loads(args[ARGUMENTS]) if ARGUMENTS in args else no_nulls(args)
        if fn is None or not isinstance(fn.get("name"), str) or \
                not isinstance(fn.get("arguments"), (str, dict)):
            got = "no object" if fn is None else ("keys " + ", ".join(fn) if fn else "no keys")
            raise PacktoolInputError(f"{turn_name(column, j)}{suffix}.tool_calls[{k}] has {got}: each call "
                                     f"needs function.name (a string) and function.arguments (a "
                                     f"string or an object); the list must be {shape}",
                                     path=path, row=row)
        if not wrapped:
            out.append({"type": "function", "function": fn})
        else:
            out.append({**(c if None not in c.values() else no_nulls_top(c)), "function": fn})
    return out


def not_a_turn(m, where: str, shape: str, path: str | None, row: int | None) -> None:
    """A turn that is null (or a string, a list...): in a JSON array or Parquet Arrow hands it
    over as None, which no key of it can be read from."""
    got = "null" if m is None else f"a {type(m).__name__}"
    raise PacktoolInputError(f"{where} is {got}, not a turn object {shape}; remove it from the "
                             f"list or write the turn", path=path, row=row)


def no_nulls_top(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def turn_name(column: str, j: int | None) -> str:
    return column if j is None else f"{column}[{j}]"


def untrained(m: dict, column: str, j: int | None, path: str | None, row: int | None) -> bool:
    """Pops the turn's `weight`: OpenAI's fine-tuning key, 0 = do not train on this assistant
    turn (its tokens get loss 0), 1 = train (the default). Anything else is named: packtool has
    no partial weights, and a loss on a turn marked 0 would invert the user's intent."""
    w = m.pop("weight", None)
    if w is None:
        return False
    if isinstance(w, bool) or not isinstance(w, (int, float)) or w not in (0, 1):
        raise PacktoolInputError(f"{turn_name(column, j)}.weight is {w!r}: a turn's weight is 0 (do not train "
                                 f"on this turn) or 1 (train, the default), as in OpenAI's fine-tuning format",
                                 path=path, row=row)
    return w == 0


def normalize_message(m: dict, path: str | None = None, row: int | None = None,
                      where: str = "messages[?]", j: int | None = None) -> dict:
    """Drop None-valued keys (Arrow fills absent struct fields with None; transformers drops
    them too) and turn a single `tool_call: {name, arguments}` into OpenAI `tool_calls`.
    `where` (the turn, e.g. messages[2]; or its column, with `j` its index there), `path` and
    `row` name it in an error: `j` apart, the name is formatted only for an error (this runs
    for every turn). Other keys stay, for the template (`chat_keys` counts those it does not
    render)."""
    if not isinstance(m, dict):
        not_a_turn(m, turn_name(where, j), "{role, content}", path, row)
    out = {k: v for k, v in m.items() if v is not None}
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = _content_text(content, turn_name(where, j), path, row)
    call = out.pop("tool_call", None)
    if call is not None:
        out["tool_calls"] = _tool_calls([call], where, j, path, row, ".tool_call")
    elif "tool_calls" in out:
        out["tool_calls"] = _tool_calls(out["tool_calls"], where, j, path, row)
    return out


def sharegpt_to_messages(turns: list[dict], path: str, row: int) -> list[dict]:
    msgs = []
    for j, t in enumerate(turns):
        if not isinstance(t, dict):
            not_a_turn(t, f"conversations[{j}]", "{from, value} (ShareGPT)", path, row)
        who = t.get("from")
        role = _SHAREGPT_ROLES.get(who)
        if role is None:
            raise PacktoolInputError(f"ShareGPT turn has unknown 'from' {who!r}; known: "
                                     f"{', '.join(sorted(_SHAREGPT_ROLES))}", path=path, row=row)
        if who == "function_call":  # LLaMA-Factory's tool call: {"name", "arguments"} (or a list) as JSON text
            msgs.append({"role": "assistant", "content": "",
                         "tool_calls": _sharegpt_calls(t.get("value"), len(msgs), path, row)})
        else:
            msgs.append({"role": role, "content": t.get("value") or ""})
        if t.get("weight") is not None:  # axolotl's ShareGPT turns carry OpenAI's weight too
            msgs[-1]["weight"] = t["weight"]
    return msgs


def _sharegpt_calls(value, j: int, path: str, row: int) -> list[dict]:
    where = f"conversations[{j}]"
    try:  # by packtool's rule (a key twice, a long integer): Python's json let both by
        calls = json_text.loads(value) if isinstance(value, str) else None
    except json.JSONDecodeError as e:
        if json_text.past_syntax(e):
            raise PacktoolInputError(f"{where} is a function_call whose value is JSON text packtool does not "
                                     f"read: {e.msg}", path=path, row=row) from None
        calls = None
    if not isinstance(calls, (dict, list)):
        raise PacktoolInputError(f"{where} is a function_call whose value is not the JSON text of "
                                 f'{{"name": ..., "arguments": ...}} (or a list of them), as LLaMA-Factory '
                                 f"writes it; fix the value", path=path, row=row)
    if calls == []:  # an assistant turn with nothing in it, whose end marker would be trained on
        raise PacktoolInputError(f"{where} is a function_call with no calls (value []): it would become "
                                 f"an empty assistant turn; drop the turn or give its calls",
                                 path=path, row=row)
    return _tool_calls(calls if isinstance(calls, list) else [calls], where, None, path, row)


def with_system(msgs: list[dict], system, column: str, path: str, row: int) -> list[dict]:
    """A row's `system` column (LLaMA-Factory / axolotl ShareGPT, some chat exports) as the first
    turn, where the prompt is trained under. Beside a system turn of its own the row has two
    prompts: which one is meant is the user's call."""
    if system is None or system == "":
        return msgs
    if not isinstance(system, str):
        raise PacktoolInputError(f"system is {type(system).__name__}, not a string (the row's system "
                                 f"prompt); write it as text", path=path, row=row)
    if msgs and msgs[0].get("role") == "system":
        raise PacktoolInputError(f"the row has a system column and {column}[0] is a system turn: two "
                                 f"system prompts; keep one of them", path=path, row=row)
    return [{"role": "system", "content": system}, *msgs]

"""Chat templates: built-ins, loading, and rendering with assistant character spans.

Loss spans come from `{% generation %}...{% endgeneration %}` blocks (the convention
transformers uses for `return_assistant_tokens_mask`). We render the block's body between two
private-use marker characters, then strip them and keep their positions: this works however
jinja buffers output (set blocks, macros). The markers' rules (no row value may hold one; the
output must hold them in order) are gen_markers.py's. A template without generation blocks (a
model folder's template, a user .jinja) gets spans by prefix rendering: assistant message i
covers render(messages[:i], add_generation_prompt=True) .. render(messages[:i+1]), minus
trailing whitespace; that needs each rendering to be a prefix of the next (checked).

Every rendering runs within `template_limits` (output size, range() items, time) and, for a
template from a file or model folder, `template_sizes` (the size of every operation's result).

Built-ins render tool calls and tool results as non-loss text (packtool/docs/TOKENIZATION.md): the loss covers an assistant's natural-language content and its end marker.
Their text is tokenize/builtin_templates.py's, re-exported here.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache

import jinja2
import jinja2.ext

from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.tokenize.builtin_templates import BUILTIN, CHATML, LLAMA3, MISTRAL  # noqa: F401  (re-exported)
from packtool.tokenize.gen_markers import CLOSE, OPEN, marked_at, strip_markers
from packtool.tokenize.native_templates import NATIVE, Fallback
from packtool.tokenize.template_limits import bounded_range, rendering, too_long
from packtool.tokenize.template_sizes import Sandbox

_GEN_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")

@dataclass(frozen=True)
class ChatTemplate:
    name: str          # builtin name, file path, "tokenizer_config.json" or "chat_template.jinja"
    text: str
    sha256: str
    has_generation: bool
    # A named set's `tool_use` template: rows with `tools` render with it, as transformers'
    # get_chat_template picks it when tools are given (`text` is then the set's `default`).
    tool_use: "ChatTemplate | None" = None


def make_template(name: str, text: str, tool_use: ChatTemplate | None = None) -> ChatTemplate:
    digest = hashlib.sha256(text.encode())
    if tool_use is not None:  # the manifest's hash covers both templates of the set
        digest.update(b"\0tool_use\0" + tool_use.text.encode())
    return ChatTemplate(name, text, digest.hexdigest(), bool(_GEN_RE.search(text)), tool_use)


def keys_text(template: ChatTemplate) -> str:
    """The template text that says which row keys it renders (chat_keys.KeyUse): jinja comments
    render nothing, so a key named only in one is not rendered; a set's tool_use counts too."""
    text = re.sub(r"\{#.*?#\}", "", template.text, flags=re.S)
    return text + ("\n" + keys_text(template.tool_use) if template.tool_use is not None else "")


def template_set(texts: dict[str, str], names: dict[str, str], set_name: str) -> ChatTemplate:
    """Named templates (name -> text; `names`: name -> how messages call it) picked per row as
    transformers' get_chat_template picks: `tool_use` (if present) for rows with `tools`, `default`
    for the others; without `default` such a row is refused at its rendering, naming the row, as
    transformers refuses it ("multiple chat templates with no default specified"). One `default`
    alone is a plain template."""
    tool_use = make_template(names["tool_use"], texts["tool_use"]) if "tool_use" in texts else None
    if "default" in texts:
        return make_template(names["default"], texts["default"], tool_use)
    refusal = (f"{set_name} holds named templates ({', '.join(sorted(texts))}) and no `default`, so a row "
               f"without tools has no template (transformers refuses it too); give the row tools, or pass "
               f"{arg('chat_template', 'FILE.jinja')} to render every row with one template")
    return make_template(set_name, "{{ packtool_fail(" + json.dumps(refusal) + ") }}", tool_use)


def template_from_config(value, name: str, flag: str | None = None, path: str | None = None) -> ChatTemplate | None:
    """A `chat_template` value as transformers reads it: a template string, or named templates
    `[{name, template}, ...]` (Hermes-2-Pro, Command-R; a repeated name: the last wins), a set
    picked per row (`template_set`)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return make_template(name, value)
    named = {d.get("name"): d.get("template") for d in value if isinstance(d, dict)} \
        if isinstance(value, list) else {}
    if not named or not all(isinstance(k, str) and isinstance(v, str) for k, v in named.items()):
        raise PacktoolInputError("chat_template is neither a template string nor a list of "
                                 f"{{name, template}} objects; fix it or pass {arg('chat_template', 'FILE.jinja')}",
                                 path=path or name, flag=flag)
    return template_set(named, {"default": name, "tool_use": f"{name} (tool_use)"}, name)


def _from_json_file(spec: str, text: str) -> ChatTemplate | None:
    """A --chat-template file that is a JSON object (a tokenizer_config.json given by mistake) is
    read for its `chat_template` key, as a model folder's is; never rendered as template text."""
    if text.lstrip()[:1] not in ("{", "["):  # jinja text never parses as a JSON object or array
        return None
    from packtool.json_text import BeyondFloat64Error, LongIntegerError, loads
    try:
        obj = loads(text)
    except json.JSONDecodeError as e:  # jinja text that starts with {{ or {%
        if isinstance(e, (LongIntegerError, BeyondFloat64Error)):  # JSON, with a number it cannot read (RB-5, RA-4)
            raise PacktoolInputError(f"line {e.lineno}: {e.msg}", path=spec, flag=cli_flag("chat_template")) from None
        return None
    except ValueError:  # (a key given twice: jinja it is not either; read as before)
        return None
    flag = cli_flag("chat_template")
    if not isinstance(obj, dict) or obj.get("chat_template") in (None, ""):
        raise PacktoolInputError("is a JSON file with no chat_template key, not a template; give the "
                                 f"template as a .jinja file (or the model folder to {arg('tokenizer')})",
                                 path=spec, flag=flag)
    return template_from_config(obj["chat_template"], os.path.abspath(spec), flag)


def read_template_file(path: str, fix: str, flag: str | None) -> str:
    """The text of a template file (--chat-template FILE, a model folder's chat_template.jinja or
    additional_chat_templates/*.jinja). A leading UTF-8 BOM (Notepad, PowerShell's Out-File) is
    refused naming the file: jinja renders it as text, so it opened every conversation (two junk
    tokens, and a second BOS where the template adds one: the text no longer starts with it), and
    transformers reads the file as it is, so skipping it would train on what the model's own
    template does not render (S46A-7)."""
    from packtool.tokenize.json_depth import SETTINGS_BYTES, read_small
    try:
        text = read_small(path, SETTINGS_BYTES, "chat template", fix, flag=flag).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PacktoolInputError(f"cannot read the chat template ({e}); {fix}", path=path, flag=flag) from None
    if text.startswith("\ufeff"):
        raise PacktoolInputError("chat template file starts with a UTF-8 byte order mark (BOM), which would be "
                                 "rendered as text at the head of every conversation; save it without one "
                                 "(UTF-8 without BOM), e.g. `sed -i '1s/^\\xEF\\xBB\\xBF//' FILE`",
                                 path=path, flag=flag)
    return text


def load_template(spec: str | None, folder_template: ChatTemplate | None) -> ChatTemplate | None:
    """`spec`: a built-in name, a .jinja path (or a tokenizer_config.json: its chat_template),
    "none", or None (the model folder's template, encode.load_tokenizer)."""
    if spec is None:
        return folder_template
    if spec == "none":
        return None
    if spec in BUILTIN:
        return make_template(spec, BUILTIN[spec])
    if os.path.isfile(spec):
        flag = cli_flag("chat_template")
        text = read_template_file(spec, "give the template's .jinja file", flag)
        t = _from_json_file(spec, text) or make_template(os.path.abspath(spec), text)
        compile_template(t)
        if t.tool_use is not None:
            compile_template(t.tool_use)
        return t
    from packtool.output.files import refuse_special_input
    from packtool.tokenize.folder_files import link_to_nothing
    refuse_special_input(spec, "chat_template")
    gone = link_to_nothing(spec, "chat_template", "restore its target, or give the template's file itself")
    if gone is not None:  # `ls` shows the name: "nor a file" sent the user looking at it
        raise gone
    raise PacktoolInputError(
        f"{arg('chat_template', spec)} is neither a built-in ({', '.join(BUILTIN)}) nor a file",
        flag=cli_flag("chat_template"))


class _Generation(jinja2.ext.Extension):
    """`{% generation %}body{% endgeneration %}` -> body wrapped in span markers."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_wrap"), [], [], body).set_lineno(lineno)

    def _wrap(self, caller):
        return OPEN + caller() + CLOSE


class TemplateRefusal(jinja2.exceptions.TemplateError):
    """A template's own raise_exception: its verdict on the row's data (roles out of order, a
    system turn misplaced), said as a data error, not as the template's failure."""


def _raise(message: str):
    raise TemplateRefusal(message)


def _fail(message: str):
    """packtool's own refusal inside a template it made (a named set without `default`): the
    template's choice is at fault, not the row."""
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Same as transformers' override: no HTML escaping, unicode kept.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=16)
def _compile(text: str, trusted: bool) -> jinja2.Template:
    # Templates from model folders and files are untrusted code: sandboxed, as in transformers.
    # Our own built-ins skip the sandbox's per-attribute checks (about 20% of render time).
    env_cls = jinja2.Environment if trusted else Sandbox
    env = env_cls(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["packtool_fail"] = _fail
    env.globals["range"] = bounded_range
    return env.from_string(text)


def compile_template(template: ChatTemplate) -> jinja2.Template:
    """The compiled template; a syntax error is a PacktoolInputError naming the template, the
    line and the fix (raised before any row is read)."""
    try:
        return _compile(template.text, BUILTIN.get(template.name) == template.text)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise PacktoolInputError(f"chat template has a syntax error at line {e.lineno}: {e.message}; "
                                 f"fix the template", path=template.name, flag=cli_flag("chat_template")) from None
    except (jinja2.exceptions.TemplateError, RecursionError, ValueError) as e:
        raise PacktoolInputError(f"chat template cannot be compiled ({type(e).__name__}: {e})",
                                 path=template.name, flag=cli_flag("chat_template")) from None


class Renderer:
    """Renders conversations to (text, assistant char spans) with one template."""

    def __init__(self, template: ChatTemplate, special: dict[str, str]) -> None:
        self.template = template
        builtin = BUILTIN.get(template.name) == template.text
        self._jinja = compile_template(template)
        self._special = dict(special)
        bad = marked_at({f"special token {k}": v for k, v in self._special.items()}) \
            if template.has_generation else None
        if bad is not None:  # the tokenizer's, not a row's: said before any row is read
            raise PacktoolInputError(bad.text("give a tokenizer whose special tokens do not hold them"),
                                     flag=cli_flag("tokenizer"))
        self._native = NATIVE[template.name] if builtin else None
        self._tool_use = Renderer(template.tool_use, special) if template.tool_use is not None else None

    def _render(self, messages: list[dict], add_generation_prompt: bool = False, row_keys=None) -> str:
        """One rendering, within the budget; any failure inside the template becomes a
        TemplateError (the caller names the row). `row_keys`: the row's tools / documents,
        passed under those names as transformers' apply_chat_template passes them."""
        ctx = self._jinja.new_context({"tools": None, "documents": None, **(row_keys or {}), "messages": messages,
                                       "add_generation_prompt": add_generation_prompt, **self._special})
        parts, n = [], 0
        with rendering() as max_chars:
            try:
                for chunk in self._jinja.root_render_func(ctx):
                    n += len(chunk)
                    if n > max_chars:
                        raise too_long()
                    parts.append(chunk)
            except jinja2.exceptions.TemplateError:
                raise
            except (Exception, RecursionError) as e:  # the template's own bug, on this row's data
                raise jinja2.exceptions.TemplateError(f"{type(e).__name__}: {e}") from None
        return "".join(parts)

    def render(self, messages: list[dict], untrained=(), row_keys=None,
               unmarked: bool = False) -> tuple[str, list[tuple[int, int]]]:
        """Raises jinja2.TemplateError (the caller names the row). `untrained`: indices of turns
        whose text gets no loss (weight 0); `row_keys`: see `_render`. A value holding a
        generation marker raises gen_markers.MarkedValue (a data error: the caller names the row),
        whether or not this template would render it: what a template renders is its own code.
        `unmarked`: the caller has checked that no value holds one (gen_markers.arrow_may_hold)."""
        if self._tool_use is not None and (row_keys or {}).get("tools") is not None:
            return self._tool_use.render(messages, untrained, row_keys, unmarked)
        if self.template.has_generation and not unmarked:
            bad = marked_at({"messages": messages, **(row_keys or {})})
            if bad is not None:
                raise bad
        text, spans = self._render_spans(messages, row_keys or None)
        for i in sorted(untrained):
            spans = self._without_turn(messages, i, text, spans, row_keys or None)
        return text, spans

    def _render_spans(self, messages: list[dict], row_keys) -> tuple[str, list[tuple[int, int]]]:
        if self._native is not None and not row_keys:  # the built-ins render no tools
            try:
                return self._native(messages, self._special)
            except Fallback:
                pass
        if self.template.has_generation:
            return strip_markers(self._render(messages, row_keys=row_keys))
        return self._render_by_prefix(messages, row_keys)

    def _without_turn(self, messages, i: int, text: str, spans, row_keys) -> list[tuple[int, int]]:
        """`spans` less turn i's text: from the end of the rendering of the turns before it to
        the end of the rendering up to it, which must each start the whole (else which text is
        that turn's cannot be told)."""
        head = self._render_spans(messages[:i], row_keys)[0] if i else ""
        upto = self._render_spans(messages[:i + 1], row_keys)[0]
        if not (upto.startswith(head) and text.startswith(upto)):
            raise jinja2.exceptions.TemplateError(
                f"turn {i} has weight 0, but this template renders a conversation's first turns "
                f"differently from the start of the whole, so that turn's text cannot be told; drop the "
                f"turn (or its weight) or use a template that renders turn by turn")
        a, b = len(head), len(upto)
        return [(s, e) for x, y in spans for s, e in ((x, min(y, a)), (max(x, b), y)) if s < e]

    def ignores_generation_prompt(self) -> bool:
        """Whether spans come by prefix rendering from a template that renders the same with
        and without add_generation_prompt: then nothing marks where an assistant turn's
        header ends, and the header (`<|im_start|>assistant` and the like) is in the loss."""
        if self._native is not None or self.template.has_generation:
            return False
        reply = "packtool probe reply"
        probe = [{"role": "user", "content": "probe"}, {"role": "assistant", "content": reply}]
        try:
            head = self._render(probe[:1], add_generation_prompt=True)
            upto = self._render(probe)
        except jinja2.exceptions.TemplateError:  # the template's own rules; rows will say
            return False
        # a template with no assistant header at all (Mistral's [INST] ... [/INST] reply) is fine
        return upto.startswith(head) and not upto[len(head):].lstrip().startswith(reply)

    def _render_by_prefix(self, messages: list[dict], row_keys=None) -> tuple[str, list[tuple[int, int]]]:
        full = self._render(messages, row_keys=row_keys)
        spans: list[tuple[int, int]] = []
        for i, m in enumerate(messages):
            # an assistant turn's whole rendering is what it generated: its text and its tool
            # calls, as this template writes them (nothing marks one apart from the other)
            if m.get("role") != "assistant" or not (m.get("content") or m.get("tool_calls")):
                continue
            head = self._render(messages[:i], add_generation_prompt=True, row_keys=row_keys) if i else ""
            upto = self._render(messages[:i + 1], row_keys=row_keys)
            if not upto.startswith(head) or not full.startswith(upto):
                raise jinja2.exceptions.TemplateError(
                    "template renders a conversation prefix differently from the whole; add "
                    "{% generation %} blocks around assistant content to the template")
            end = len(upto.rstrip())
            if end > len(head):
                spans.append((len(head), end))
        return full, spans

"""Plain-Python renderings of the built-in chat templates (the jinja text stays the reference).

Jinja costs 40-150 us per conversation, the largest Python cost of tokenizing chat data on
two cores. These functions produce the same text and assistant spans in a few microseconds
for well-formed messages; anything unusual (a missing key, a non-string value, an unknown
role) raises `Fallback` and the caller renders with jinja, which then decides what happens
(including the template's own errors). tests/tokenize/test_tokenize_native.py checks equality with
the jinja templates on every fixture conversation and on edge cases.
"""
from __future__ import annotations

import json


class Fallback(Exception):
    """Not the common case: render with jinja instead."""


class _Out:
    __slots__ = ("parts", "pos", "spans")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.pos = 0
        self.spans: list[tuple[int, int]] = []

    def emit(self, s: str) -> None:
        self.parts.append(s)
        self.pos += len(s)

    def gen(self, s: str) -> None:  # a {% generation %} block
        if s:
            self.spans.append((self.pos, self.pos + len(s)))
        self.emit(s)

    def result(self) -> tuple[str, list[tuple[int, int]]]:
        return "".join(self.parts), self.spans


def _s(v) -> str:
    if type(v) is not str:
        raise Fallback
    return v


def _content(m: dict) -> str:
    return _s(m.get("content"))


# json.dumps(x, ensure_ascii=False) (the templates' tojson) without making an encoder per call
_tojson = json.JSONEncoder(ensure_ascii=False).encode


def _call_json(call: dict, key: str) -> str:
    fn = call.get("function")
    if not isinstance(fn, dict) or "arguments" not in fn:
        raise Fallback
    args = fn["arguments"]
    args = args if type(args) is str else _tojson(args)
    return '{"name": ' + _tojson(_s(fn.get("name"))) + ', "' + key + '": ' + args + "}"


_HEAD = "<|im_start|>assistant\n"


def chatml(messages: list[dict], special: dict) -> tuple[str, list[tuple[int, int]]]:
    # one string per turn, not _Out's pieces: this is the hot path of a chatml pack
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    for m in messages:
        role, text = m.get("role"), m.get("content")  # _s inlined: two calls a turn
        if type(role) is not str:
            raise Fallback
        if role == "assistant":
            calls = m.get("tool_calls")
            if calls:
                turn = _HEAD
                if text:
                    spans.append((pos + len(_HEAD), pos + len(_HEAD) + len(_s(text))))
                    turn += text + "\n"
                for c in calls:
                    turn += "<tool_call>\n" + _call_json(c, "arguments") + "\n</tool_call>"
                turn += "<|im_end|>\n"
            else:
                body = _s(text) + "<|im_end|>"
                spans.append((pos + len(_HEAD), pos + len(_HEAD) + len(body)))
                turn = _HEAD + body + "\n"
        elif type(text) is str:
            turn = "<|im_start|>" + role + "\n" + text + "<|im_end|>\n"
        else:
            raise Fallback
        parts.append(turn)
        pos += len(turn)
    return "".join(parts), spans


def llama3(messages: list[dict], special: dict) -> tuple[str, list[tuple[int, int]]]:
    o = _Out()
    o.emit(special.get("bos_token", ""))
    for m in messages:
        role = _s(m.get("role"))
        o.emit("<|start_header_id|>" + ("ipython" if role == "tool" else role) + "<|end_header_id|>\n\n")
        if role == "assistant":
            calls = m.get("tool_calls")
            if calls:
                if m.get("content"):
                    o.gen(_content(m).strip())
                    o.emit("\n")
                for c in calls:
                    o.emit(_call_json(c, "parameters"))
                o.emit("<|eot_id|>")
            else:
                o.gen(_content(m).strip() + "<|eot_id|>")
        else:
            o.emit(_content(m).strip() + "<|eot_id|>")
    return o.result()


def mistral(messages: list[dict], special: dict) -> tuple[str, list[tuple[int, int]]]:
    o = _Out()
    eos = special.get("eos_token")
    if eos is None:
        raise Fallback
    if messages and messages[0].get("role") == "system":
        system, loop = _content(messages[0]), messages[1:]
    else:
        system, loop = "", messages
    if system and (not loop or loop[0].get("role") != "user"):
        raise Fallback  # the template raises its own error
    o.emit(special.get("bos_token", ""))
    due = "user"  # the alternation the template checks: jinja raises its error
    for i, m in enumerate(loop):
        role = m.get("role")
        if role == "user":
            if due != "user":
                raise Fallback
            due = "assistant"
            if i == 0 and system:
                o.emit("[INST] " + system + "\n\n" + _content(m) + " [/INST]")
            else:
                o.emit("[INST] " + _content(m) + " [/INST]")
        elif role == "assistant":
            calls = m.get("tool_calls")
            if not calls:
                if due != "assistant":
                    raise Fallback
                due = "user"
            if m.get("content"):
                o.emit(" ")
                o.gen(_content(m) + eos)
            if calls:
                o.emit(" [TOOL_CALLS] [" + ", ".join(_call_json(c, "arguments") for c in calls) + "]" + eos)
        elif role == "tool":
            o.emit(" [TOOL_RESULTS] " + _content(m) + "[/TOOL_RESULTS]")
        else:
            raise Fallback
    return o.result()


NATIVE = {"chatml": chatml, "llama3": llama3, "mistral": mistral}

"""What each operation of the chat-template sandbox would build, and the sandbox that asks
before it runs: every operation that can build a large string or list is held to
`template_limits`' bounds before it runs where the size can be computed (replace: occurrences
x growth; center: the width; a rendered list: its text, found without building it), else once
built (`template_limits.checked`); large results add up per rendering. Bounds are read from
`template_limits` at each check (tests lower them)."""
from __future__ import annotations

import functools
import re
import sys

import jinja2
import jinja2.filters
import jinja2.utils
from jinja2.compiler import CodeGenerator, optimizeconst
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from jinja2.utils import generate_lorem_ipsum, pass_context

from packtool.tokenize import template_limits as limits
from packtool.tokenize.template_limits import checked, need, take, text_size


def _arg(args, kwargs, i: int, name: str, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


def _int(x) -> int:
    return x if isinstance(x, int) else 0


def _replace_size(s, old, new, count) -> int:
    try:
        n = s.count(old) if len(old) else len(s) + 1
        grow = len(new) - len(old)
    except TypeError:
        return 0  # wrong types: replace() itself says so
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return len(s) + n * grow


_LINE_ENDS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def _translate_size(s, table) -> int:
    if not isinstance(s, str) or not isinstance(table, dict):
        return len(s)
    longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
    if longest * len(s) <= limits.MAX_RENDER_CHARS:
        return len(s)
    return len(s) + sum(s.count(chr(k) if isinstance(k, int) else k) * (len(v) - 1)
                        for k, v in table.items() if isinstance(v, str) and isinstance(k, (int, str)))


# Case maps turn one code point into one to three (Unicode's SpecialCasing: ß -> SS, ΐ -> Ϊ́), so
# a result is never shorter than its input and, for ASCII, exactly as long. Per code point
# (upper, lower, casefold, swapcase) the exact size is the input's length plus what the
# growing code points add, counted in C; title and capitalize map by context, so the input's
# length is only their lower bound (the rest is checked once built, at most 3x a bounded input).
_CASE_MAPS = frozenset({"upper", "lower", "casefold", "swapcase"})
_CASE_LIKE = _CASE_MAPS | {"capitalize", "title"}
_MOST_PER_CODE_POINT = 3  # SpecialCasing.txt; tests/tokenize/test_template_case_sizes.py reads Python's tables


@functools.cache
def case_growth(name: str) -> tuple[tuple[str, int], ...]:
    """(code point, characters it adds) for every code point that `str.<name>()` maps to
    more than one, read from Python's own tables (once per process, when first needed)."""
    grow = ((chr(cp), len(getattr(chr(cp), name)()) - 1) for cp in range(sys.maxunicode + 1))
    return tuple((c, n) for c, n in grow if n > 0)


def case_size(s, name: str) -> int:
    """len(s.<name>()) without building it, for the per-code-point case maps; the input's
    length (a lower bound) for the others, and wherever the result cannot reach the bound."""
    n = len(s)
    if (not isinstance(s, str) or s.isascii() or name not in _CASE_MAPS
            or n * _MOST_PER_CODE_POINT <= limits.MAX_RENDER_CHARS):
        return n
    return n + sum(s.count(c) * extra for c, extra in case_growth(name))


def _at_least_input(owner, name: str, a: tuple, k: dict) -> bool:
    """Whether the method's result is at least as long as `owner`: the case maps, and a
    UTF-8 encode (one byte or more per code point; other codecs may drop some)."""
    if name in _CASE_LIKE:
        return True
    enc = _arg(a, k, 0, "encoding", "utf-8")
    return name == "encode" and isinstance(enc, str) and enc.lower().replace("_", "-") in ("utf-8", "utf8")


def _method_pre(owner, name: str, a: tuple, k: dict):
    """Check a str/bytes method before it runs; returns its arguments (a generator given to
    join() taken into a list, split()'s maxsplit capped one past the bound)."""
    what = f"{name}()"
    if name == "replace":
        need(what, chars=_replace_size(owner, _arg(a, k, 0, "old"), _arg(a, k, 1, "new"), _arg(a, k, 2, "count", -1)))
    elif name in ("center", "ljust", "rjust", "zfill"):
        need(what, chars=_int(_arg(a, k, 0, "width", 0)))
    elif name == "expandtabs":
        tab = "\t" if isinstance(owner, str) else b"\t"
        need(what, chars=len(owner) + owner.count(tab) * _int(_arg(a, k, 0, "tabsize", 8)))
    elif name == "join" and a:
        items = take(a[0], what)
        sized = [len(x) for x in items if isinstance(x, (str, bytes, bytearray))] if isinstance(items, list) else [0]
        need(what, chars=sum(sized) + len(owner) * max(len(sized) - 1, 0))
        a = (items,) + a[1:]
    elif name == "translate" and a:
        need(what, chars=_translate_size(owner, a[0]))
    elif name in ("split", "rsplit"):
        cap = _arg(a, k, 1, "maxsplit", -1)
        if isinstance(cap, int) and not 0 <= cap <= limits.MAX_ITEMS:  # one more piece than allowed: refused after
            a, k = (_arg(a, k, 0, "sep"), limits.MAX_ITEMS), {}
    elif name == "splitlines":
        ends = _LINE_ENDS if isinstance(owner, str) else (b"\n", b"\r")
        need(what, items=1 + sum(owner.count(e) for e in ends))
    elif _at_least_input(owner, name, a, k):
        need(what, chars=case_size(owner, name))
    return a, k


def method_pre(obj, args: tuple, kwargs: dict):
    owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "")
    if isinstance(owner, (str, bytes, bytearray)):
        return _method_pre(owner, name, args, kwargs)
    if name == "to_bytes" and isinstance(owner, int):
        need("to_bytes()", chars=_int(_arg(args, kwargs, 0, "length", 1)))
    elif name == "fromkeys" and args:
        args = (take(args[0], "fromkeys()"),) + args[1:]
    return args, kwargs


_PERCENT = re.compile(r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<w>\*|\d+)?(?:\.(?P<p>\*|\d+))?[hlL]?(?P<t>.?)", re.S)
_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(\d*)[,_]?(?:\.(\d*))?", re.S)


def _number(digits: str) -> int:
    return int(digits) if len(digits) < 19 else limits.MAX_RENDER_CHARS + 1


def percent_size(fmt: str, args) -> int:
    """About len(fmt % args): widths, precisions (`*` ones too) and the values' text."""
    values = list(args) if isinstance(args, tuple) else [args]
    mapping = args if isinstance(args, dict) else None
    total, i = len(fmt), 0
    for m in _PERCENT.finditer(fmt):
        if m["t"] == "%":
            continue
        for part in (m["w"], m["p"]):
            if part == "*":
                total += abs(_int(values[i])) if i < len(values) else 0
                i += 1
            elif part:
                total += _number(part)
        if m["key"] is not None and mapping is not None:
            total += text_size(mapping.get(m["key"], ""))
        else:
            total += text_size(values[i]) if i < len(values) else 0
            i += 1
        if total > limits.MAX_RENDER_CHARS:
            break
    return total


class _SizingFormatter(SandboxedFormatter):
    """Walks a str.format call as the sandbox does (fields, nested specs) but adds up widths,
    precisions and the values' text instead of building it."""

    def vformat(self, format_string, args, kwargs, what: str = "format()"):
        self.size, self.what = len(format_string), what
        super().vformat(format_string, args, kwargs)
        return self.size

    def format_field(self, value, format_spec):
        m = _SPEC.match(format_spec)
        self.size += text_size(value) + sum(_number(g) for g in m.groups() if g)
        need(self.what, chars=self.size)
        # a nested spec's field ({:{w}}) must come back as text for the outer spec to read
        return format(value, format_spec) if isinstance(value, (int, float)) else ""


def bounded_format(env, method, wrapped):
    text, is_map = method.__self__, method.__name__ == "format_map"

    def run(*args, **kwargs):
        if not is_map:
            _SizingFormatter(env).vformat(text, args, kwargs)
        elif len(args) == 1 and not kwargs:
            _SizingFormatter(env).vformat(text, (), args[0], "format_map()")
        return checked(method.__name__ + "()", wrapped(*args, **kwargs))
    return run


def check_binop(operator: str, left, right) -> None:
    if operator == "**":
        if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 4096:
            raise limits.TemplateBudgetError(f"{left} ** {right} is too large; fix the template")
    elif operator == "+":
        if isinstance(left, (str, bytes)) and isinstance(right, (str, bytes)):
            need("`+`", chars=len(left) + len(right))
        elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
            need("`+`", items=len(left) + len(right))
    elif operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(n, int) and isinstance(seq, (str, bytes)):
                need("`*`", chars=len(seq) * n)
            elif isinstance(n, int) and isinstance(seq, (list, tuple)):
                need("`*`", items=len(seq) * n)
    elif operator == "%" and isinstance(left, str):
        need("`%`", chars=percent_size(left, right))


def bounded_output(value):
    """`finalize`: every `{{ value }}` before str() makes it text."""
    if not isinstance(value, str):
        need("rendering a value", chars=text_size(value))
    return value


def bounded_concat(parts) -> str:
    """`concat` of a block's output (macro, {% set %} block, caller(), {% filter %})."""
    parts = parts if isinstance(parts, list) else list(parts)
    need("a block's output", chars=sum(map(len, parts)))
    return checked("a block's output", "".join(parts))


def bounded_tilde(items: tuple) -> str:
    need("`~`", chars=sum(len(x) if isinstance(x, str) else text_size(x) for x in items))
    return checked("`~`", "".join([x if isinstance(x, str) else str(x) for x in items]))


class SizedCodeGenerator(CodeGenerator):
    """Compiles `a ~ b` to `environment.tilde((a, b))`, where jinja joins with no hook."""

    @optimizeconst
    def visit_Concat(self, node, frame) -> None:
        self.write("environment.tilde((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _as_text(value, what: str) -> str:
    if not isinstance(value, str):
        need(what, chars=text_size(value))
    return value if isinstance(value, str) else str(value)


def _json_indent(args, kwargs) -> int:
    # tojson's indent is a keyword in every template seen; a positional one is looked for too
    given = [kwargs.get("indent")] + list(args)
    return max([len(x) if isinstance(x, str) else _int(x) for x in given] + [0])


def _filter_pre(name: str, context, value, a: tuple, k: dict):
    what = f"|{name}"
    if name in ("replace", "indent", "wordwrap", "center", "escape", "e", "forceescape",
                "urlize", "format"):
        value = _as_text(value, what)
    if name == "replace":
        need(what, chars=_replace_size(value, _arg(a, k, 0, "old"), _arg(a, k, 1, "new"), _arg(a, k, 2, "count", -1)))
    elif name == "center":
        need(what, chars=_int(_arg(a, k, 0, "width", 80)))
    elif name == "indent":
        width = _arg(a, k, 0, "width", 4)
        need(what, chars=len(value) + (value.count("\n") + 1) * (len(width) if isinstance(width, str) else _int(width)))
    elif name == "wordwrap":
        width, wrap = _int(_arg(a, k, 0, "width", 79)), _arg(a, k, 2, "wrapstring") or "\n"
        lines = len(value) // max(width, 1) + value.count("\n") + 1
        need(what, chars=len(value) + lines * (len(wrap) if isinstance(wrap, str) else 0))
    elif name in ("escape", "e", "forceescape"):
        need(what, chars=len(value) + 4 * sum(value.count(c) for c in "&<>\"'"))
    elif name == "urlize":
        extra = sum(len(x) for x in (_arg(a, k, 2, "target"), _arg(a, k, 3, "rel")) if isinstance(x, str)) + 40
        need(what, chars=3 * len(value) + (value.count(" ") + value.count("\n") + 1) * extra)
    elif name == "format":
        need(what, chars=percent_size(value, k or a))
    elif name == "join":
        value = value if isinstance(value, str) else take(value, what)
        sep, attribute = _arg(a, k, 0, "d", ""), _arg(a, k, 1, "attribute")
        if attribute is not None and not isinstance(value, str):
            get = jinja2.filters.make_attrgetter(context.environment, attribute)
            value, a, k = [get(x) for x in value], (sep,), {}
        sizes = [len(x) if isinstance(x, str) else text_size(x) for x in value] if not isinstance(value, str) \
            else [len(value)]
        n = len(value)
        need(what, chars=sum(sizes) + (len(sep) if isinstance(sep, str) else 0) * max(n - 1, 0))
    elif name in ("list", "sort", "unique", "dictsort", "groupby", "slice", "batch", "sum"):
        value = take(value, what)
        if name == "batch" and _arg(a, k, 1, "fill_with") is not None:
            need(what, items=_int(_arg(a, k, 0, "linecount", 0)))
        elif name == "slice":
            need(what, items=_int(_arg(a, k, 0, "slices", 0)))
        elif name == "sum" and isinstance(value, (list, tuple)):
            start = _arg(a, k, 1, "start", 0)
            need(what, items=sum(len(x) for x in value if isinstance(x, (list, tuple)))
                 + (len(start) if isinstance(start, (list, tuple)) else 0))
    elif name in ("string", "pprint", "urlencode", "xmlattr"):
        need(what, chars=text_size(value, indent=1 if name == "pprint" else 0))
    elif name in ("upper", "lower", "capitalize", "title"):  # jinja's: str() of the value, case-mapped
        need(what, chars=case_size(value, name) if isinstance(value, str) else text_size(value))
    elif name == "reverse" and isinstance(value, str):  # a copy; a list's is an iterator
        need(what, chars=len(value))
    elif name == "tojson":
        need(what, chars=text_size(value, indent=_json_indent(a, k)))
    return value, a, k


def _bounded_filter(name: str, fn):
    pass_arg = jinja2.utils._PassArg.from_obj(fn)  # noqa: SLF001 (jinja's own marker)

    # a context filter is never run at compile time (constant folding), outside any bound
    @pass_context
    def bounded(context, value, *args, **kwargs):
        value, args, kwargs = _filter_pre(name, context, value, args, kwargs)
        first = () if pass_arg is None else (
            context if pass_arg is jinja2.utils._PassArg.context else  # noqa: SLF001
            context.eval_ctx if pass_arg is jinja2.utils._PassArg.eval_context else context.environment,)  # noqa: SLF001
        rv = fn(*first, value, *args, **kwargs)
        return rv if rv is value else checked(f"|{name}", rv)  # the input back (|default): not new
    return bounded


class BoundedFilters(dict):
    """Every filter, the built-ins and those set later (tojson), checked for size."""

    def __init__(self, filters: dict) -> None:
        super().__init__()
        for name, fn in filters.items():
            self[name] = fn

    def __setitem__(self, name: str, fn) -> None:
        super().__setitem__(name, _bounded_filter(name, fn))


def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002
    need("lipsum()", chars=_int(n) * (_int(max) * 16 + 20))
    return generate_lorem_ipsum(n, html, min, max)


class Sandbox(ImmutableSandboxedEnvironment):
    """The sandbox, plus a size check before every operation that can build a large string or
    list: binary operators, `~`, every filter, str/bytes methods, format(), `%`, block output
    and rendered values."""

    intercepted_binops = frozenset({"+", "*", "%", "**"})
    code_generator_class = SizedCodeGenerator
    concat = staticmethod(bounded_concat)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, finalize=bounded_output, **kwargs)
        self.filters = BoundedFilters(self.filters)
        self.globals["lipsum"] = bounded_lipsum

    def call_binop(self, context, operator, left, right):
        check_binop(operator, left, right)
        return checked(f"`{operator}`", super().call_binop(context, operator, left, right))

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja's names)
        args, kwargs = method_pre(__obj, args, kwargs)
        rv = super().call(__context, __obj, *args, **kwargs)
        return checked(f"{getattr(__obj, '__name__', 'a call')}()", rv)

    def wrap_str_format(self, value):
        wrapped = super().wrap_str_format(value)
        return None if wrapped is None else bounded_format(self, value, wrapped)

    @staticmethod
    def tilde(items: tuple) -> str:
        return bounded_tilde(items)

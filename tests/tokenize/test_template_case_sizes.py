"""Case maps and kin (str.upper() and its filters, encode(), |reverse) are held to the
per-operation bound BEFORE they build, like every operation whose size can be known: a row's
content is not bounded, and upper() of ß x 16M is 32M characters. The exact size for the
per-code-point case maps (upper, lower, casefold, swapcase) counts the code points that grow;
title and capitalize map by context, so their input's length, a lower bound, is checked first."""
from __future__ import annotations

import tracemalloc

import pytest

import packtool.tokenize.template_limits as limits
import packtool.tokenize.template_sizes as sizes
from packtool.tokenize.templates import Renderer, make_template

BOUND = 1 << 20  # characters one operation may build (lowered from the README's 16 Mi)

# name -> (template expression on the content, content): each would build over BOUND
# characters; "in band": the input is under BOUND, only the result is over (exact sizes);
# "over": the input itself is over BOUND (the lower bound refuses it)
CASES = {
    "upper() in band": ("m.content.upper()", "\u00df" * (BOUND - 1)),  # ß -> SS
    "lower() in band": ("m.content.lower()", "\u0130" * (BOUND - 1)),  # İ -> i + combining dot
    "casefold() in band": ("m.content.casefold()", "\u00df" * (BOUND - 1)),
    "swapcase() in band": ("m.content.swapcase()", "\u0390" * (BOUND - 1)),  # ΐ -> 3 code points
    "|upper in band": ("m.content|upper", "\u00df" * (BOUND - 1)),
    "|lower in band": ("m.content|lower", "\u0130" * (BOUND - 1)),
    "upper() over": ("m.content.upper()", "a" * (BOUND + BOUND // 2)),
    "title() over": ("m.content.title()", "a" * (BOUND + BOUND // 2)),
    "capitalize() over": ("m.content.capitalize()", "a" * (BOUND + BOUND // 2)),
    "|title over": ("m.content|title", "a" * (BOUND + BOUND // 2)),
    "|capitalize over": ("m.content|capitalize", "a" * (BOUND + BOUND // 2)),
    "encode() over": ("m.content.encode()", "a" * (BOUND + BOUND // 2)),
    "encode('utf-8') over": ("m.content.encode('utf-8')", "a" * (BOUND + BOUND // 2)),
    "|reverse over": ("m.content|reverse", "a" * (BOUND + BOUND // 2)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_case_map_is_refused_before_it_builds(monkeypatch, case):
    monkeypatch.setattr(limits, "MAX_RENDER_CHARS", BOUND)
    expr, content = CASES[case]
    text = "{% for m in messages %}{{ (" + expr + ")|length }}{% endfor %}"
    renderer = Renderer(make_template("/models/x/chat.jinja", text), {})
    messages = [{"role": "user", "content": content}]
    for name in sizes._CASE_MAPS:  # Python's tables, read once per process: not traced (slow there)
        sizes.case_growth(name)
    tracemalloc.start()
    try:
        with pytest.raises(limits.TemplateBudgetError) as e:
            renderer.render(messages)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(e.value)
    assert "would build" in msg and f"{BOUND:,}" in msg and "fix the template" in msg, msg
    assert peak < BOUND // 2, (case, peak)  # refused before the result (over BOUND bytes) was built


@pytest.mark.parametrize("expr, content, built", [
    ("m.content.upper()", "\u00df" * (BOUND // 2), BOUND),  # grows to the bound, not past it
    ("m.content|upper", "\u00df" * (BOUND // 2), BOUND),
    ("m.content.swapcase()", "\u0390" * (BOUND // 3), BOUND // 3 * 3),
    ("m.content.title()", "a" * BOUND, BOUND),
    ("m.content.encode('latin-1')", "\u00e9" * BOUND, BOUND),  # not UTF-8: checked once built
])
def test_what_fits_still_renders(monkeypatch, expr, content, built):
    monkeypatch.setattr(limits, "MAX_RENDER_CHARS", BOUND)
    text = "{% for m in messages %}{{ (" + expr + ")|length }}{% endfor %}"
    got = Renderer(make_template("/models/x/chat.jinja", text), {}).render([{"role": "user", "content": content}])
    assert str(built) in str(got), got


@pytest.mark.parametrize("name", sorted(sizes._CASE_MAPS))
def test_case_sizes_are_exact_and_python_maps_at_most_three(monkeypatch, name):
    """The bound the shortcut relies on, read from Python's tables; and the counted size is
    the built one on text mixing every growing code point with plain and non-ASCII ones."""
    grow = sizes.case_growth(name)
    assert grow and max(n for _, n in grow) + 1 <= sizes._MOST_PER_CODE_POINT
    s = ("".join(c for c, _ in grow) + "x\u00e9\u4e2d") * 5
    monkeypatch.setattr(limits, "MAX_RENDER_CHARS", len(s))  # past the shortcut: counted
    assert sizes.case_size(s, name) == len(getattr(s, name)())

"""Type checks of the library's config parameters (`packtool.pack(tokenize=...)` and the like):
a wrong type is one PacktoolConfigError naming the parameter and the call that fixes it, not an
AttributeError from deep inside a stage."""
from __future__ import annotations

from packtool.errors import PacktoolConfigError

# parameter type name -> how a caller builds one (the fix the message names)
_HOW = {"Alignment": "packtool.Alignment(capacity=8192, tp=..., cp=...)",
        "PackingConfig": "packtool.PackingConfig(algorithm='bfd', ...)",
        "TokenizeConfig": "packtool.TokenizeConfig(tokenizer='path/to/tokenizer.json', ...)"}


def expect(value, cls: type, func: str, param: str, optional: bool = False):
    """`value` when it is a `cls` (or None if `optional`); otherwise the one-line error."""
    if isinstance(value, cls) or (optional and value is None):
        return value
    name = cls.__name__
    how = _HOW.get(name, f"a {name}")
    if isinstance(value, str) and name == "TokenizeConfig":
        how = f"packtool.TokenizeConfig(tokenizer={value!r})"
    got = "nothing (None)" if value is None else f"{type(value).__name__} {_short(value)}"
    article = "an" if name[0] in "AEIOU" else "a"
    raise PacktoolConfigError(f"{func}({param}=...) takes {article} {name}, got {got}: pass {param}={how}")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["expect"]

"""The ranges of the manifest's numbers that a reader sizes something by (slabs.format.parse_manifest
asks them after the field types, slabs.fields): a manifest that lies is one line, not an allocation."""
from __future__ import annotations

from packtool.integers import TOKEN_ID_BOUND
from packtool.slabs.fields import MAX_COUNT

NUMBER_RANGES = {"tp": 1 << 16, "cp": 1 << 16, "capacity": (1 << 31) - 1,  # cu_seqlens are int32
                 "fixed_length": (1 << 31) - 1, "s": (1 << 31) - 1, "t": (1 << 31) - 1,
                 "usable": (1 << 31) - 1, "dp": 1 << 20}


def check_numbers(m: dict, path: str, error) -> None:
    """Every number a reader sizes something by is in range, so a manifest that lies (a count
    of 10^15, a negative one, tp=10^15, a vocab_size below a special id) is one line here, not
    an allocation that exhausts memory or a crash in whichever reader uses it first."""
    def bad(field: str, v, want: str):
        raise error(f"{path}: {field} is {v!r}, {want}; the manifest is edited or damaged: "
                    f"re-run `packtool pack`")

    def count(field: str, v, top: int = MAX_COUNT) -> None:
        if isinstance(v, float) and (v != v or not 0 <= v <= top):
            bad(field, v, f"not a count in [0, {top}]")
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v <= top:
            bad(field, v, f"not a count in [0, {top}]")

    for key, v in (m.get("stats") or {}).items():
        for k, x in (v.items() if isinstance(v, dict) else [(None, v)]):
            count(f"stats.{key}" + (f".{k}" if k else ""), x)
    tok = m.get("tokenizer") or {}
    vocab = tok.get("vocab_size")
    for i, e in enumerate(m["shards"]):
        for key in ("rows", "tokens", "loss_tokens", "bytes"):
            count(f"shards[{i}].{key}", e.get(key))
        top = e.get("max_token_id", 0)  # absent in outputs written before it
        if not isinstance(top, int) or isinstance(top, bool) or not 0 <= top < (vocab or TOKEN_ID_BOUND):
            bad(f"shards[{i}].max_token_id", top, f"not a token id in [0, {vocab or '2^31'})"
                + (" (tokenizer.vocab_size)" if vocab else ""))
    cfg = m["config"]
    for part in ("alignment", "packing"):
        for key, top in NUMBER_RANGES.items():
            v = (cfg.get(part) or {}).get(key) if isinstance(cfg.get(part), dict) else None
            if isinstance(v, int) and not isinstance(v, bool) and not 1 <= v <= top:
                bad(f"config.{part}.{key}", v, f"outside [1, {top}]")
    if vocab is not None and not 1 <= vocab < TOKEN_ID_BOUND:  # vocab_size itself is an int32
        bad("tokenizer.vocab_size", vocab, "outside [1, 2^31)")
    for key in ("pad_id", "eos_id", "bos_id"):
        v = tok.get(key)
        if v is not None and not 0 <= v < (vocab or TOKEN_ID_BOUND):
            bad(f"tokenizer.{key}", v, f"outside [0, vocab_size={vocab})" if vocab else "negative or over 2^31")

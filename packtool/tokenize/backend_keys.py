"""tokenizer_config.json keys that change the ids, as the model's own tokenizer applies them.

Owns the rule for the keys transformers reads to (re)build the tokenizer's backend, beside
add_bos_token/add_eos_token (tokenizer_config.ConfigSwitches, which only decide BOS/EOS):

- `add_prefix_space` (true/false): a model class (GPT2Tokenizer, GPTNeoXTokenizer, Qwen2,
  LlamaTokenizer, ... in transformers 4.x fast and 5.x) builds its pre-tokenizer from it:
  ByteLevel's `add_prefix_space`, Metaspace's `prepend_scheme` (true: "always" where `legacy`
  is true, else "first"; false: "never"), and a legacy SentencePiece conversion's `Prepend("▁")`
  normalizer goes with false. Applied here to the tokenizer.json's own pre-tokenizer and
  normalizer (`edits`, `apply`), so the first word of a text is the token the model sees. The
  generic classes (PreTrainedTokenizerFast, TokenizersBackend) do not read the key: a folder
  naming one keeps its tokenizer.json as it is, as transformers does. A folder naming no
  class leaves AutoTokenizer to pick one by config.json's model_type, from a table of its own
  that reads the key for some (gpt2, qwen2) and not others (llama): where the key would change
  the ids, it is refused in one line asking for the class, never guessed.
- `split_special_tokens` true: the model's tokenizer splits special tokens written in text into
  pieces; packtool encodes them as their ids (a chat template writes them as text), so it is
  refused in one line naming the key, never packed as other ids.
- `do_lower_case` (BERT-style classes build their normalizer from it) that disagrees with the
  tokenizer.json's normalizer: refused in one line, never packed with the other case.
- `added_tokens_decoder`'s flags (lstrip, rstrip, single_word, normalized, special) for a token
  tokenizer.json holds at that id: every transformers class re-adds an entry that differs from
  tokenizer.json's as the config gives it (AddedToken's defaults for a flag not given), so its
  flags are set on tokenizer.json's token (S48A-10: an end-of-turn marker's rstrip eats the "\n"
  after it). An entry tokenizer.json lacks, or gives another id, is refused (tokenizer_config.
  FolderSpecials.refuse_absent).

The applied keys join the cache key (request._fingerprint) where any is applied, so a cache
made before they were read is not reused for them.
"""
from __future__ import annotations

import json

from packtool.errors import PacktoolInputError, cli_flag
from packtool.tokenize.tokenizer_config import config_switch, token_id_key

# transformers' classes that load tokenizer.json as it is, reading none of these keys
GENERIC = {"PreTrainedTokenizerFast", "TokenizersBackend"}


def edits(conf: dict, path: str | None, tok) -> tuple:
    """What the config at `path` asks of the backend (`tok`, a loaded tokenizers.Tokenizer)
    that it does not already do, as a hashable tuple ((key, value), ...) for the cache key and
    `apply`; () when nothing. Keys the rule refuses raise PacktoolInputError naming the file,
    the key and the fix."""
    return _prefix_edits(conf, path, tok) + _flag_edits(conf, path, tok)


# AddedToken's flags, as transformers re-adds an added_tokens_decoder entry
FLAGS = ("lstrip", "rstrip", "single_word", "normalized", "special")


def _flag_edits(conf: dict, path: str | None, tok) -> tuple:
    """(("added_tokens", ((id, *FLAGS values), ...)),) for the added_tokens_decoder entries whose
    flags differ from tokenizer.json's token at that id; () when none."""
    from tokenizers import AddedToken
    decoder = conf.get("added_tokens_decoder")
    if not isinstance(decoder, dict):
        return ()  # another shape: FolderSpecials refuses it
    held = tok.get_added_tokens_decoder()
    out = []
    for i, entry in decoder.items():
        if token_id_key(i) is None or not isinstance(entry, dict):
            continue
        have = held.get(token_id_key(i))
        if have is None or entry.get("content") != have.content:
            continue  # refuse_absent names it
        for k in FLAGS:
            if k in entry and not isinstance(entry[k], bool):
                raise PacktoolInputError(f"added_tokens_decoder's {have.content!r} has {k} "
                                         f"{json.dumps(entry[k])[:60]}, not true or false: write true or false "
                                         f"(JSON, unquoted) or remove the key", path=path, flag=cli_flag("tokenizer"))
        given = AddedToken(have.content, **{k: entry[k] for k in FLAGS if k in entry})
        want = tuple(getattr(given, k) for k in FLAGS)
        if want != tuple(getattr(have, k) for k in FLAGS):
            out.append((int(i), *want))
    return (("added_tokens", tuple(out)),) if out else ()


def _prefix_edits(conf: dict, path: str | None, tok) -> tuple:
    split = config_switch(conf, "split_special_tokens", path)
    if split:
        raise PacktoolInputError("split_special_tokens is true: the model's tokenizer splits special tokens "
                                 "written in text into pieces, packtool encodes them as their ids (a chat "
                                 "template writes them as text); set it false or remove the key",
                                 path=path, flag=cli_flag("tokenizer"))
    prefix = config_switch(conf, "add_prefix_space", path)
    lower = config_switch(conf, "do_lower_case", path)
    named = conf.get("tokenizer_class")
    if (prefix is None and lower is None) or named in GENERIC:
        return ()
    backend = {k: json.loads(part.__getstate__()) if part is not None else None
               for k, part in (("pre_tokenizer", tok.pre_tokenizer), ("normalizer", tok.normalizer))}
    if lower is not None and lower != _lowercases(backend.get("normalizer")):
        raise PacktoolInputError(f"do_lower_case is {json.dumps(lower)}, while tokenizer.json's normalizer "
                                 f"{'does not lowercase' if lower else 'lowercases'}: the model's tokenizer "
                                 "builds its normalizer from the key, packtool reads tokenizer.json; make them "
                                 "agree (or remove the key)", path=path, flag=cli_flag("tokenizer"))
    if prefix is None:
        return ()
    legacy = conf.get("legacy") is True
    want = (("add_prefix_space", prefix), ("legacy", legacy))
    if _applied(backend, want) == backend:
        return ()
    if named is None:  # AutoTokenizer then picks a class by config.json's model_type: some read the key
        raise PacktoolInputError(f"add_prefix_space {json.dumps(prefix)} would change the ids (tokenizer.json "
                                 f"{'adds no' if prefix else 'adds a'} leading space) and no tokenizer_class says "
                                 "whether the model's tokenizer applies it (transformers' model classes such as "
                                 "GPT2Tokenizer do, PreTrainedTokenizerFast does not): name the class in "
                                 "tokenizer_config.json (tokenizer_class) or remove the key", path=path,
                                 flag=cli_flag("tokenizer"))
    return want


def apply(tokenizer_json: str, want: tuple) -> str:
    """The tokenizer.json text with `edits`' settings applied."""
    whole = json.loads(tokenizer_json)
    settings = dict(want)
    if "add_prefix_space" in settings:
        whole.update(_applied(whole, want))
    flags = {e[0]: dict(zip(FLAGS, e[1:])) for e in settings.get("added_tokens", ())}
    for token in whole.get("added_tokens") or []:
        token.update(flags.get(token.get("id"), {}))
    return json.dumps(whole)


def _applied(backend: dict, want: tuple) -> dict:
    settings = dict(want)
    prefix, legacy = settings["add_prefix_space"], settings["legacy"]
    scheme = ("always" if legacy else "first") if prefix else "never"
    out = json.loads(json.dumps({k: backend.get(k) for k in ("pre_tokenizer", "normalizer")}))  # a copy

    def pre(p):
        if isinstance(p, dict) and p.get("type") == "Sequence":
            p["pretokenizers"] = [pre(q) for q in p.get("pretokenizers", [])]
        elif isinstance(p, dict) and p.get("type") == "ByteLevel":
            p["add_prefix_space"] = prefix
        elif isinstance(p, dict) and p.get("type") == "Metaspace":
            p["prepend_scheme"] = scheme
            p.pop("add_prefix_space", None)  # tokenizers < 0.14's spelling of the same
        return p
    out["pre_tokenizer"] = pre(out.get("pre_tokenizer"))
    if not prefix:  # a legacy SentencePiece conversion prepends in its normalizer
        out["normalizer"] = _without_prepend(out.get("normalizer"))
    return out


def _without_prepend(n):
    if not isinstance(n, dict):
        return n
    if n.get("type") == "Prepend" and n.get("prepend") == "▁":
        return None
    if n.get("type") == "Sequence":
        kept = [m for m in (_without_prepend(m) for m in n.get("normalizers", [])) if m is not None]
        return {**n, "normalizers": kept}
    return n


def _lowercases(n) -> bool:
    if not isinstance(n, dict):
        return False
    if n.get("type") == "Sequence":
        return any(_lowercases(m) for m in n.get("normalizers", []))
    return n.get("type") == "Lowercase" or (n.get("type") == "BertNormalizer" and bool(n.get("lowercase")))


__all__ = ["FLAGS", "GENERIC", "apply", "edits"]

"""Tokenizer loading and the encode step: rendered text + char spans -> ids + loss mask.

Every row is tokenized as ONE string (`encode_batch(..., add_special_tokens=False)`), so the
ids always equal a direct `tokenizers` encoding of the rendered text. The loss mask marks
every token that overlaps an assistant/response character span (the rule transformers'
`return_assistant_tokens_mask` uses): a token straddling a span boundary counts as a target.
Spans are mapped with `Encoding.char_to_token` at span ends only, so no per-token offsets
list is built in Python. BOS/EOS are added as ids, never as text.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache

import numba
import numpy as np
from tokenizers import Tokenizer

from packtool.errors import PacktoolInputError, arg, cli_flag, missing
from packtool.tokenize.backend_keys import apply as apply_keys, edits as backend_edits
from packtool.tokenize.checksum import sha256_file
from packtool.tokenize.folder_files import file_present
from packtool.tokenize.folder_templates import folder_template
from packtool.tokenize.json_depth import load_json_file
from packtool.tokenize.shapes import RenderedBatch
from packtool.tokenize.templates import ChatTemplate
from packtool.tokenize.tokenizer_config import ConfigSwitches, FolderSpecials, missing_special, read_config

_BOS_NAMES = ("<s>", "<|begin_of_text|>", "<bos>", "[CLS]")
_EOS_NAMES = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "[SEP]")
_PAD_NAMES = ("<pad>", "[PAD]", "<|pad|>", "<|finetune_right_pad_id|>", "<unk>")


@dataclass(frozen=True)
class TokenizerInfo:
    path: str                  # tokenizer.json that was loaded
    sha256: str                # of tokenizer.json
    chat_template: str | None  # built-in name, template file path, "tokenizer_config.json" or None
    template_sha256: str | None
    bos_id: int | None
    eos_id: int | None
    pad_id: int                # what pads hold in slabs (never a target)
    vocab_size: int
    bos_token: str | None = None
    eos_token: str | None = None
    pad_token: str | None = None
    config_sha256: str | None = None  # of the folder's tokenizer_config.json, if any
    special_tokens_map_sha256: str | None = None  # of its special_tokens_map.json, where read (FolderSpecials)


@dataclass
class LoadedTokenizer:
    tokenizer: Tokenizer
    info: TokenizerInfo
    folder_template: ChatTemplate | None   # the folder's chat template, if any (folder_template)
    template_gone: PacktoolInputError | None  # a link to nothing among its templates (folder_templates.refuse_gone)
    switches: ConfigSwitches = ConfigSwitches()  # tokenizer_config.json's add_bos_token/add_eos_token
    backend: tuple = ()  # its keys applied to the backend (backend_keys.edits): in the cache key


def _post_processor_specials(tok: Tokenizer) -> tuple[str | None, str | None]:
    """BOS/EOS that the tokenizer's own TemplateProcessing would add around a single text."""
    pp = json.loads(tok.post_processor.__getstate__()) if tok.post_processor is not None else {}
    procs = pp.get("processors", [pp]) if pp.get("type") == "Sequence" else [pp]
    for p in procs:
        if p and p.get("type") == "TemplateProcessing":
            single = p.get("single") or []
            seq_at = [i for i, s in enumerate(single) if "Sequence" in s]
            if not seq_at:
                continue
            before = [s["SpecialToken"]["id"] for s in single[:seq_at[0]] if "SpecialToken" in s]
            after = [s["SpecialToken"]["id"] for s in single[seq_at[0] + 1:] if "SpecialToken" in s]
            return (before[0] if before else None), (after[-1] if after else None)
    return None, None


TOKENIZER_BYTES = 256 << 20  # the largest real tokenizer.json (a 256k vocabulary) is ~35 MB


@lru_cache(maxsize=4)
def _load_cached(path: str, size: int, mtime_ns: int, settings: tuple = ()) -> Tokenizer:
    # Deserializing a 3.5 MB tokenizer.json costs ~0.5 s; runs that tokenize several input
    # groups in one process load it once. Keyed by size+mtime so an edited file reloads.
    # `settings`: tokenizer_config.json's keys that change the backend (backend_keys).
    if settings:
        tok = Tokenizer.from_str(apply_keys(_load_cached(path, size, mtime_ns).to_str(), settings))
    else:
        from packtool.storage import read_small  # a copied-over 8 GB file is refused by its size, not loaded
        tok = Tokenizer.from_buffer(read_small(path, TOKENIZER_BYTES, "tokenizer.json", "pass the tokenizer "
                                               "folder or its tokenizer.json", flag=cli_flag("tokenizer")))
    if not caches_words(tok):
        resize = getattr(tok.model, "_resize_cache", None)  # tokenizers >= 0.20; WordPiece has none
        if resize is not None:
            resize(0)
    return tok


_PROBE = "the cat sat on the mat"


def caches_words(tok: Tokenizer) -> bool:
    """Whether the model's own cache (BPE, Unigram: each pre-token merged, up to 10,000 keys of
    up to 255 bytes, per encode thread, never evicted) is keyed by words. A tokenizer without
    a word-splitting pre-tokenizer (SentencePiece conversions: Mistral, Llama 2) keys it by
    whole segments of the text, which distinct rows never hit again, at ~34 bytes per key
    byte: a 20k-row Taskmaster pack with mistral kept ~110 MiB more, reached only when the
    cache was full (issue 23 class 8). `load_tokenizer` turns such a cache off: on a quiet
    16-core host it saved no encode CPU (0.99-1.03x), while gpt2's word cache saves 16-25%
    and is kept (BENCHMARKS.md "Raw chat pack: peak RSS")."""
    pre = tok.pre_tokenizer
    pieces = pre.pre_tokenize_str(_PROBE) if pre is not None else [_PROBE]
    return len(pieces) >= len(_PROBE.split())


# Files of a tokenizer folder that are not tokenizer.json, which users pass by mistake.
_SIBLINGS = {"vocab.json": "a vocabulary file?", "merges.txt": "a BPE merges file?",
             "tokenizer_config.json": "the tokenizer's settings, not the tokenizer",
             "special_tokens_map.json": "a special-tokens map?", "config.json": "a model config?",
             "tokenizer.model": "a SentencePiece model: convert it to tokenizer.json with transformers once",
             "vocab.txt": "a vocabulary file?"}


def _what_file(path: str) -> str | None:
    """What a file that `tokenizers` cannot load looks like, when it is recognisably another
    file (by name, or a JSON object without a tokenizer's "model"); None: a damaged tokenizer."""
    name = os.path.basename(path)
    if name in _SIBLINGS:
        return _SIBLINGS[name]
    try:
        if os.path.getsize(path) > TOKENIZER_BYTES:
            return None
        obj = load_json_file(path, "tokenizer.json", limit=TOKENIZER_BYTES)
    except PacktoolInputError:
        raise
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if isinstance(obj, dict) and "model" not in obj:
        ints = sum(isinstance(v, int) for v in list(obj.values())[:100])
        return "a vocabulary file?" if obj and ints == min(len(obj), 100) else 'no "model" key'
    return None


def _fix_for(path: str) -> str:
    folder = os.path.dirname(path) or "."
    beside = os.path.join(folder, "tokenizer.json")
    if os.path.exists(beside) and os.path.abspath(beside) != os.path.abspath(path):
        return f"the tokenizer folder {folder} or {beside}"
    return "the tokenizer folder or its tokenizer.json"


def load_tokenizer(spec: str | None, cfg, template_name: str | None = None) -> LoadedTokenizer:
    """`spec`: a tokenizer.json or a folder with one (and optionally tokenizer_config.json)."""
    if not spec:
        raise missing(PacktoolInputError, "tokenizer", f"{arg('tokenizer')} is required to tokenize raw text")
    conf: dict = {}
    conf_path = None
    if os.path.isdir(spec):
        path = os.path.join(spec, "tokenizer.json")
        if not file_present(path):
            hint = " (it has tokenizer.model: convert it to tokenizer.json with transformers once)" \
                if os.path.exists(os.path.join(spec, "tokenizer.model")) else ""
            raise PacktoolInputError(f"no tokenizer.json in folder{hint}", path=spec, flag=cli_flag("tokenizer"))
        conf, conf_path = read_config(spec)
    else:
        path = spec
        if not file_present(path):
            raise PacktoolInputError("tokenizer file not found", path=spec, flag=cli_flag("tokenizer"))
    from packtool.output.files import refuse_special_input
    refuse_special_input(path, "tokenizer")
    st = os.stat(path)
    try:
        tok = _load_cached(os.path.abspath(path), st.st_size, st.st_mtime_ns)
    except PacktoolInputError:  # over its bound: said with the size
        raise
    except Exception as e:  # tokenizers raises a bare Exception on bad JSON
        what = _what_file(path)
        if what:
            raise PacktoolInputError(f"not a tokenizer.json ({what}): pass {_fix_for(path)}",
                                     path=path, flag=cli_flag("tokenizer")) from None
        raise PacktoolInputError(f"cannot load tokenizer ({e})", path=path, flag=cli_flag("tokenizer")) from None
    settings = backend_edits(conf, conf_path, tok)
    if settings:  # what the model's own tokenizer builds from its config (add_prefix_space)
        tok = _load_cached(os.path.abspath(path), st.st_size, st.st_mtime_ns, settings)
    vocab = tok.get_vocab(with_added_tokens=True)
    specials = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    pp_bos, pp_eos = _post_processor_specials(tok)
    named = FolderSpecials.of(spec if os.path.isdir(spec) else None, conf, conf_path)
    named.refuse_absent(vocab, path)

    def pick(override, conf_key, pp_value, names, must_be_special=True):
        from_folder, named_in = named.tokens[conf_key]
        for source, cand in (("argument", override), ("config", from_folder), ("post_processor", pp_value)):
            if cand:
                if cand not in vocab:
                    raise missing_special(source, conf_key, cand, path, named_in)
                return cand
        for n in names:
            if n in vocab and (n in specials or not must_be_special):
                return n
        return None

    bos = pick(cfg.bos_token, "bos_token", pp_bos, _BOS_NAMES)
    eos = pick(cfg.eos_token, "eos_token", pp_eos, _EOS_NAMES)
    pad = pick(cfg.pad_token, "pad_token", None, _PAD_NAMES, must_be_special=False)
    pad_id = vocab[pad] if pad else (vocab[eos] if eos else 0)
    info = TokenizerInfo(
        path=os.path.abspath(path), sha256=sha256_file(path), chat_template=template_name,
        template_sha256=None, bos_id=vocab.get(bos) if bos else None,
        eos_id=vocab.get(eos) if eos else None, pad_id=int(pad_id),
        vocab_size=tok.get_vocab_size(with_added_tokens=True), bos_token=bos, eos_token=eos,
        pad_token=pad if pad else eos, config_sha256=sha256_file(conf_path) if conf_path else None,
        special_tokens_map_sha256=named.map_sha256)
    return LoadedTokenizer(tok, info, *folder_template(spec if os.path.isdir(spec) else None, conf),
                           ConfigSwitches.of(conf, conf_path, pp_bos), settings)


def refuse_absent_specials(cfg, info: TokenizerInfo, shapes) -> None:
    """A BOS or EOS asked for that the tokenizer has none of is refused, the two alike, before
    any row is read (tokenize.request.resolve_cache: every engine and every caller): `--bos`/
    `--eos` given (add_bos/add_eos True), or the EOS that ends a text or untemplated row by
    default (add_eos None). Added as nothing, the rows would lack the separator the flag or the
    default promises, without a word. A default BOS is only "when the tokenizer has one";
    pre-tokenized rows get neither (they are kept exactly)."""
    texts = [s for s in shapes if s.kind != "tokens"]
    if not texts:
        return
    eos_default = any(not s.templated for s in texts)
    for name, token, given, default in (("add_bos", info.bos_id, cfg.add_bos, False),
                                        ("add_eos", info.eos_id, cfg.add_eos, eos_default)):
        if token is not None or not (given or (given is None and default)):
            continue
        kind, key = ("a BOS", "bos_token") if name == "add_bos" else ("an EOS", "eos_token")
        why = (f"{arg(name, True)} asks for {kind} token" if given else
               f"text rows end with {kind} token by default ({arg(name, True)})")
        raise PacktoolInputError(f"{why}, but this tokenizer has none: pass {arg(name, False)}, or give a "
                                 f"tokenizer folder whose tokenizer_config.json names its {key}",
                                 path=info.path, flag=cli_flag(name))


# ---------------------------------------------------------------- encoding

@dataclass
class EncodedBatch:
    ids: np.ndarray        # int32, rows concatenated
    mask: np.ndarray       # uint8, same length
    lengths: np.ndarray    # int32, per row
    empty: np.ndarray      # bool, per row: no content
    all_masked: np.ndarray  # bool, per row: no target token, as a slab holds the row (`no_target`)


@numba.njit(cache=True)
def _assemble(content, content_mask, lens, bos, eos, bos_id, eos_id):
    n = lens.shape[0]
    out_lens = np.empty(n, np.int32)
    total = 0
    for i in range(n):
        out_lens[i] = lens[i] + bos[i] + eos[i]
        total += out_lens[i]
    ids = np.empty(total, np.int32)
    mask = np.zeros(total, np.uint8)
    loss = np.zeros(n, np.int64)  # target tokens per row
    src = 0
    dst = 0
    for i in range(n):
        if bos[i]:
            ids[dst] = bos_id   # BOS is never a target (nothing precedes it)
            dst += 1
        for k in range(lens[i]):
            ids[dst] = content[src]
            mask[dst] = content_mask[src]
            loss[i] += content_mask[src]
            src += 1
            dst += 1
        if eos[i]:
            ids[dst] = eos_id
            # EOS is a target exactly when the token before it is (it ends that response)
            mask[dst] = mask[dst - 1] if lens[i] > 0 else 0
            loss[i] += mask[dst]
            dst += 1
    return ids, mask, out_lens, loss


def _span_token_range(enc, n_tok: int, a: int, b: int) -> tuple[int, int]:
    """[t0, t1) = tokens overlapping chars [a, b), for offsets in text order."""
    t0 = None
    for c in range(a, b):
        t0 = enc.char_to_token(c)
        if t0 is not None:
            break
    if t0 is None:
        return 0, 0
    t1 = None
    for c in range(b - 1, a - 1, -1):
        t1 = enc.char_to_token(c)
        if t1 is not None:
            break
    # several tokens can cover one char (byte fallback): take every one that starts before b
    while t1 + 1 < n_tok and enc.token_to_chars(t1 + 1)[0] < b:
        t1 += 1
    return t0, t1 + 1


def span_mask(enc, n_tok: int, spans: list[tuple[int, int]]) -> np.ndarray:
    m = np.zeros(n_tok, np.uint8)
    for a, b in spans:
        t0, t1 = _span_token_range(enc, n_tok, a, b)
        m[t0:t1] = 1
    return m


def encode_rendered(tok: Tokenizer, rb: RenderedBatch, info: TokenizerInfo,
                    add_bos: bool | None, add_eos: bool | None, templated: bool,
                    encodings=None) -> EncodedBatch:
    """Tokenize a rendered batch. `encodings` lets the caller run encode_batch elsewhere
    (a worker thread) and hand the result in."""
    if encodings is None:
        encodings = start_encode(tok, rb)
    # `e.ids` is a Python list; numpy converts a list in one C loop (faster than fromiter)
    id_arrays = [np.array(e.ids, np.int32) for e in encodings]
    lens = np.fromiter(map(len, id_arrays), np.int32, count=len(id_arrays))
    content = np.concatenate(id_arrays) if id_arrays else np.zeros(0, np.int32)
    if all(s is None for s in rb.spans):
        content_mask = np.ones(content.shape[0], np.uint8)
    else:
        parts = [np.ones(n, np.uint8) if sp is None else span_mask(e, int(n), sp)
                 for e, n, sp in zip(encodings, lens, rb.spans)]
        content_mask = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    n = len(rb.texts)
    bos_auto = add_bos is None
    use_bos = info.bos_id is not None and add_bos is not False
    if use_bos and bos_auto:  # don't double a BOS the template already wrote
        bos = np.fromiter((not t.startswith(info.bos_token) for t in rb.texts), np.uint8, count=n)
    else:
        bos = np.full(n, 1 if use_bos else 0, np.uint8)
    if add_eos is None:
        add_eos = not templated
    # a BOS/EOS asked for that the tokenizer lacks was refused before (refuse_absent_specials)
    eos = np.full(n, 1 if add_eos else 0, np.uint8)
    ids, mask, out_lens, _ = _assemble(content, content_mask, lens, bos, eos,
                                       info.bos_id if info.bos_id is not None else -1,
                                       info.eos_id if info.eos_id is not None else -1)
    labeled = np.fromiter((sp is not None for sp in rb.spans), np.bool_, count=n)
    return EncodedBatch(ids, mask, out_lens, np.asarray(rb.empty, bool) | (lens == 0),
                        no_target(mask, out_lens, labeled))


def no_target(mask: np.ndarray | None, lens: np.ndarray, labeled) -> np.ndarray:
    """Per row: the row trains nothing by the rows' own mask, the one rule of
    EncodedBatch.all_masked (refused under --on-empty error, skipped and counted under skip), for
    rows encoded and rows pre-tokenized. A `labeled` row (a bool, or one per row: a loss_mask or
    labels column, a chat template's or a prompt/response shape's mask) is judged as a slab holds
    it, where a sequence's first token is never a target (FORMAT.md, loss_mask): a mask whose only
    target is its first token trains nothing (S45A-7, it was packed with none and counted
    nowhere). A row without labels (`mask` None or every content token a target) has a target
    while it holds a token: one of a single token is packed, and pack counts it
    (planning.summary.with_cache, sequences_one_token), never refused (the owner's rule)."""
    lens = np.asarray(lens, np.int64)
    if mask is None:
        return lens == 0
    loss = row_sums(mask, lens)
    labeled = np.broadcast_to(np.asarray(labeled, np.bool_), lens.shape)
    starts = np.cumsum(lens) - lens
    first = np.zeros(lens.size, np.int64)
    judged = labeled & (lens > 0)
    first[judged] = mask[starts[judged]]
    return loss - first == 0


def row_sums(flat: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Per-row sums of a flat array split by `lens` (zero-length rows give 0)."""
    cs = np.concatenate(([0], np.cumsum(flat, dtype=np.int64)))
    ends = np.cumsum(lens, dtype=np.int64)
    return cs[ends] - cs[ends - lens]


def start_encode(tok: Tokenizer, rb: RenderedBatch):
    """encode_batch releases the GIL and runs on every core; offsets are only needed when
    some row has spans, otherwise the cheaper encode_batch_fast is used."""
    fast = all(s is None for s in rb.spans) and hasattr(tok, "encode_batch_fast")
    from packtool.tokenize.long_rows import refuse_unencodable
    from packtool.tokenize.tokenizer_pool import encode
    refuse_unencodable(tok, rb.texts, fast)  # a Rust allocation that fails aborts the process
    return encode(tok, rb.texts, fast)

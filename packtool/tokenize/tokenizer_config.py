"""What packtool takes from a tokenizer folder's JSON files besides tokenizer.json: its
tokenizer_config.json, read once (`read_config`), and its special_tokens_map.json and
added_tokens.json where transformers reads them (`FolderSpecials.of`); every value taken checked for its type here
(`config_token`, `config_switch`), so that a value of another type is one line naming the file
and the key, never an internal error further on; and what its add_bos_token says a run does
(`ConfigSwitches.settle`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.tokenize.checksum import sha256_file
from packtool.tokenize.folder_files import file_present
from packtool.tokenize.json_depth import load_json_file

CONFIG = "tokenizer_config.json"
SPECIAL_MAP = "special_tokens_map.json"
ADDED_FILE = "added_tokens.json"  # token -> id, a save before transformers 4.34
SPECIALS = ("bos_token", "eos_token", "pad_token")


def read_config(folder: str, name: str = CONFIG) -> tuple[dict, str | None]:
    """The folder's tokenizer_config.json (or `name`) as a dict and its path; ({}, None) when it has none."""
    path = os.path.join(folder, name)
    if not file_present(path):
        return {}, None
    try:
        conf = load_json_file(path, name, flag=cli_flag("tokenizer"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PacktoolInputError(f"cannot read as JSON ({e}); fix or remove it", path=path,
                                 flag=cli_flag("tokenizer")) from None
    if not isinstance(conf, dict):
        raise PacktoolInputError("is not a JSON object; fix or remove it", path=path, flag=cli_flag("tokenizer"))
    return conf, path


def _kind(v) -> str:
    return {list: "a list", dict: "an object", bool: "a boolean", int: "a number", float: "a number",
            str: "a string"}.get(type(v), type(v).__name__)


def config_token(conf: dict, key: str, path: str | None) -> str | None:
    """A special token (bos_token, eos_token, pad_token): its text, as a string or an AddedToken
    object's `content` (how transformers saves one); None where the key is absent, null or "".
    Anything else would reach the vocabulary lookup as a value no token can be."""
    v = conf.get(key)
    where = v
    if isinstance(v, dict):
        if "content" not in v:
            raise PacktoolInputError(f"{key} is an object without \"content\", not a token string: write the "
                                     f"token's text (or {{\"content\": TEXT}}) or remove the key", path=path,
                                     flag=cli_flag("tokenizer"))
        v = v["content"]
    if v is None or isinstance(v, str):
        return v or None
    what = f"{key}'s content" if isinstance(where, dict) else key
    raise PacktoolInputError(f"{what} is {_kind(v)} ({json.dumps(v)[:60]}), not a token string: write the "
                             f"token's text or remove the key", path=path, flag=cli_flag("tokenizer"))


def token_id_key(key: object) -> int | None:
    """The token id an added_tokens_decoder key names ("50257"), else None: ASCII digits, at most
    10 (ids are below 2^31). str.isdigit() admits `²`, which int() refuses, and int() of 4,300+
    digits raises: either was a bare ValueError, not the key's refusal (RA-6)."""
    return int(key) if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 10 else None


def _token_list(conf: dict, key: str, path: str | None) -> list[tuple[int | None, str]]:
    """The tokens a list key adds (additional_special_tokens; extra_special_tokens, also an
    object of name -> token in transformers 5), or added_tokens_decoder's id -> token entries, as
    (id or None, text); each token a string or an object with a "content" string."""
    v = conf.get(key)
    if v is None:
        return []
    if key == "added_tokens_decoder":
        if not isinstance(v, dict) or not all(token_id_key(i) is not None for i in v):
            raise PacktoolInputError(f"{key} is {_kind(v)} ({json.dumps(v)[:60]}), not an object of token ids "
                                     f"(\"50257\": {{\"content\": TEXT, ...}}): fix or remove the key", path=path,
                                     flag=cli_flag("tokenizer"))
        return [(token_id_key(i), _listed_token(conf, key, path, t)) for i, t in v.items()]
    items = list(v.values()) if key == "extra_special_tokens" and isinstance(v, dict) else v
    if not isinstance(items, list):
        raise PacktoolInputError(f"{key} is {_kind(v)} ({json.dumps(v)[:60]}), not a list of tokens: fix or "
                                 f"remove the key", path=path, flag=cli_flag("tokenizer"))
    return [(None, _listed_token(conf, key, path, t)) for t in items]


def _listed_token(conf: dict, key: str, path: str | None, t) -> str:
    text = config_token({key: t}, key, path) if isinstance(t, (str, dict)) else t
    if isinstance(text, str) and text:
        return text
    raise PacktoolInputError(f"{key} holds {json.dumps(t)[:60]}, not a token string: write the token's text (or "
                             f"{{\"content\": TEXT}}) or remove it", path=path, flag=cli_flag("tokenizer"))


def _added_ids(ids: dict, path: str | None) -> list[tuple[str, int]]:
    """added_tokens.json's (token, id) pairs; an entry of another shape named in one line."""
    for t, i in ids.items():
        if not t or not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise PacktoolInputError(f"holds {json.dumps(t)[:60]}: {json.dumps(i)[:60]}, not a token and its id "
                                     f"(\"<|im_start|>\": 50257): fix or remove it", path=path,
                                     flag=cli_flag("tokenizer"))
    return list(ids.items())


# where a folder's files add tokens to the vocabulary (transformers' from_pretrained adds each
# one tokenizer.json lacks, with an id of its own), per file
ADDED_IN_CONFIG = ("added_tokens_decoder", "additional_special_tokens", "extra_special_tokens")
ADDED_IN_MAP = ("additional_special_tokens",)


@dataclass(frozen=True)
class FolderSpecials:
    """The special tokens a tokenizer folder names (SPECIALS), each with the file that names it,
    and the tokens its files add to the vocabulary (ADDED_IN_CONFIG, ADDED_IN_MAP, ADDED_FILE)."""
    tokens: dict            # key -> (its text or None, the file it came from or None)
    map_sha256: str | None  # of special_tokens_map.json where it was read: in the cache key and manifest
    added: tuple = ()       # (key, file, id or None, text) of every token a file adds

    @classmethod
    def of(cls, folder: str | None, conf: dict, conf_path: str | None) -> "FolderSpecials":
        """As transformers' from_pretrained reads them (4.x and 5.x alike): tokenizer_config.json's,
        then, where that config has no added_tokens_decoder (saves before 4.34, which wrote the
        special tokens to the map alone), special_tokens_map.json's, whose keys replace the
        config's. Newer saves write both files, and their map is not read, as transformers does not
        read it: an EOS named only in the map (a ChatML fine-tune's <|im_end|>) would otherwise
        become a well-known name (<|endoftext|>) the model never emits (S46A-12)."""
        tokens = {k: (config_token(conf, k, conf_path), conf_path) for k in SPECIALS}
        older = folder is not None and "added_tokens_decoder" not in conf
        smap, map_path = read_config(folder, SPECIAL_MAP) if older else ({}, None)
        tokens.update({k: (config_token(smap, k, map_path), map_path) for k in SPECIALS if k in smap})
        added = [(k, f, i, t) for c, f, keys in ((conf, conf_path, ADDED_IN_CONFIG), (smap, map_path, ADDED_IN_MAP))
                 for k in keys for i, t in _token_list(c, k, f)]
        # transformers turns the same older save's added_tokens.json into added_tokens_decoder (RA-7)
        ids, ids_path = read_config(folder, ADDED_FILE) if older else ({}, None)
        added += [(ADDED_FILE, ids_path, i, t) for t, i in _added_ids(ids, ids_path)]
        return cls(tokens, sha256_file(map_path) if map_path else None, tuple(added))

    def refuse_absent(self, vocab: dict, tokenizer_json: str) -> None:
        """A token a file adds that tokenizer.json lacks, or an added_tokens_decoder id that
        tokenizer.json gives another token, is refused naming the file, the key and the tokens
        (S47A-3): the model's tokenizer (transformers) adds such a token with an id of its own,
        packtool would encode each as ordinary pieces (a ChatML <|im_start|> as 7 tokens) and the
        model would train on a chat format it is never prompted with."""
        fix = (f"save the tokenizer again with transformers' save_pretrained (it writes them into "
               f"{os.path.basename(tokenizer_json)})")
        # one pass, grouped by (key, file) in the order they come: a rescan of every entry per entry
        # cost seconds per load with thousands of added tokens (a visual-token vocabulary's 8k-32k)
        groups: dict[tuple, dict] = {}
        for key, path, _, t in self.added:
            group = groups.setdefault((key, path), {})
            if t not in vocab:
                group[t] = None
        for (key, path), group in groups.items():
            lacking = list(group)
            if lacking:
                shown = ", ".join(repr(t) for t in lacking[:5]) + (f" and {len(lacking) - 5} more"
                                                                    if len(lacking) > 5 else "")
                raise PacktoolInputError(f"{key} names {shown}, which {tokenizer_json} lacks: the model's "
                                         f"tokenizer adds them with ids of their own, packtool would split each "
                                         f"into ordinary pieces; {fix}, or remove them from {key} if the model "
                                         f"was never trained with them", path=path, flag=cli_flag("tokenizer"))
        for key, path, i, t in self.added:
            if i is not None and vocab[t] != i:
                raise PacktoolInputError(f"{key} gives {t!r} id {i}, while {tokenizer_json} holds it as id "
                                         f"{vocab[t]}: {fix}, or fix the id", path=path, flag=cli_flag("tokenizer"))


def missing_special(source: str, key: str, token: str, path: str, named_in: str | None) -> PacktoolInputError:
    """A special token not in the vocabulary, named where its value came from: the command line has
    no flag for these, so a folder's value is the file's to fix that named it (`named_in`:
    tokenizer_config.json or special_tokens_map.json; the library may also override it), an
    argument's the argument's, a post_processor's the tokenizer.json's."""
    where = f"the vocabulary of {path}"
    if source == "argument":
        return PacktoolInputError(f"{arg(key, token)} is not in {where}: pass a token it has, or leave "
                                  f"{arg(key)} out to use the tokenizer's own", path=path, flag=cli_flag(key))
    if source == "config":
        cli = cli_flag("tokenizer")
        also = "" if cli else f", or pass {arg(key)}= to override it"
        return PacktoolInputError(f"{key} {token!r} is not in {where}: fix {key} in "
                                  f"{os.path.basename(named_in)} to a token the tokenizer has (or remove the key){also}",
                                  path=named_in, flag=cli)
    return PacktoolInputError(f"its post_processor adds {key} {token!r}, which is not in its vocabulary: fix "
                              f"the post_processor or the vocabulary of this tokenizer.json", path=path,
                              flag=cli_flag("tokenizer"))


def config_switch(conf: dict, key: str, path: str | None) -> bool | None:
    """A true/false setting (add_bos_token, add_eos_token); None where absent or null. A string
    such as "false" is refused rather than read as truthy."""
    v = conf.get(key)
    if v is None or isinstance(v, bool):
        return v
    raise PacktoolInputError(f"{key} is {_kind(v)} ({json.dumps(v)[:60]}), not true or false: write "
                             f"true or false (JSON, unquoted) or remove the key", path=path,
                             flag=cli_flag("tokenizer"))


@dataclass(frozen=True)
class ConfigSwitches:
    """What tokenizer_config.json says the tokenizer adds around a text (transformers' slow and
    4.x fast Llama/GPT-NeoX/Gemma classes rebuild their post_processor from these two keys)."""
    add_bos: bool | None = None      # add_bos_token; None: the key is absent
    add_eos: bool | None = None      # add_eos_token
    path: str | None = None          # the config file
    post_processor_bos: str | None = None  # the BOS the tokenizer.json's own post_processor adds

    @classmethod
    def of(cls, conf: dict, path: str | None, post_processor_bos: str | None) -> "ConfigSwitches":
        return cls(config_switch(conf, "add_bos_token", path), config_switch(conf, "add_eos_token", path),
                   path, post_processor_bos)

    def settle(self, cfg):
        """`cfg` (a TokenizeConfig) with add_bos settled where the config decides it: a BOS the
        config says the tokenizer does not add (GPT-NeoX/Pythia, OLMo, GPT-2-style configs naming a
        bos_token) is not added, as the model's own tokenizer does not add it. add_bos given
        (--bos/--no-bos) wins. add_bos_token true leaves the default (BOS when the tokenizer has
        one, not doubled after a template that writes it); add_eos_token leaves add_eos alone
        (docs/TOKENIZATION.md says why). Settled here, the cache key and the manifest's
        input.tokenize name add_bos false, as --no-bos would."""
        if cfg.add_bos is not None or self.add_bos is not False:
            return cfg
        if self.post_processor_bos:  # transformers 5 reads the post_processor alone, 4.x the config
            from packtool.notes import note
            note(f"{self.path}: add_bos_token is false, while tokenizer.json's post_processor adds "
                 f"{self.post_processor_bos} (transformers 5 follows the post_processor, 4.x the "
                 f"config): packtool follows the config and adds no BOS; pass {arg('add_bos', True)} to add it")
        return replace(cfg, add_bos=False)

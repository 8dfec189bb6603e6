"""A tokenizer folder's tokenizer_config.json: read once (`read_config`), and every value packtool
takes from it checked for its type here (`config_token`, `config_switch`), so that a value of
another type is one line naming the file and the key, never an internal error further on; and
what its add_bos_token says a run does (`ConfigSwitches.settle`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

from packtool.errors import PacktoolInputError, arg, cli_flag
from packtool.tokenize.json_depth import load_json_file

CONFIG = "tokenizer_config.json"


def read_config(folder: str) -> tuple[dict, str | None]:
    """The folder's tokenizer_config.json as a dict and its path; ({}, None) when it has none."""
    path = os.path.join(folder, CONFIG)
    if not os.path.exists(path):
        return {}, None
    try:
        conf = load_json_file(path, CONFIG, flag=cli_flag("tokenizer"))
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

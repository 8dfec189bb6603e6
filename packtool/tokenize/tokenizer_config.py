"""A tokenizer folder's tokenizer_config.json: read once (`read_config`), and every value packtool
takes from it checked for its type here (`config_token`, `config_switch`), so that a value of
another type is one line naming the file and the key, never an internal error further on.
"""
from __future__ import annotations

import json
import os

from packtool.errors import PacktoolInputError, cli_flag
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

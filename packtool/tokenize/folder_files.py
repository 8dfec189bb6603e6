"""Whether a tokenizer folder's file is there: the one question every reader of the folder asks
(tokenizer.json, tokenizer_config.json, special_tokens_map.json, added_tokens.json, chat_template.jinja,
additional_chat_templates/*.jinja), and the tokenizer file given itself.

A name that is a link to nothing (a Hub cache snapshot copied without `-L`, so its relative
links into `blobs/` lead nowhere; `blobs/` pruned; an `hf download` cut short) was taken for no
file: the config's add_bos_token, special tokens and chat template dropped without a word, the
ids changed, and a dangling tokenizer.json said "no tokenizer.json in folder" (S47A-13). It is
refused naming the link and where it points, as a data file's link to nothing is; a name that
is absent is absent.
"""
from __future__ import annotations

import os

from packtool.errors import PacktoolInputError, cli_flag


def link_to_nothing(path: str, flag: str = "tokenizer", fix: str | None = None) -> PacktoolInputError | None:
    """The refusal of `path` if it is a link to nothing (naming where it points), else None; `fix`:
    what to do, for a link that is no folder's entry (--chat-template FILE)."""
    if os.path.exists(path) or not os.path.islink(path):
        return None
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return PacktoolInputError(f"is a symbolic link to nothing ({target}): what it stood for is gone (a Hub "
                              f"cache snapshot copied without its blobs, or a download cut short): "
                              f"{fix or 'copy the folder again following links (cp -rL) or download it again'}",
                              path=path, flag=cli_flag(flag))


def file_present(path: str) -> bool:
    """Whether `path` names something (os.path.exists); a link to nothing is refused."""
    gone = link_to_nothing(path)
    if gone is not None:
        raise gone
    return os.path.exists(path)

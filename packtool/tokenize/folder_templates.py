"""A model folder's chat template(s), found as transformers 5.x finds them
(tokenization_utils_base: `from_pretrained` lists the files, `_from_pretrained` picks):

- chat_template.jinja is the template named `default`; every additional_chat_templates/NAME.jinja
  (`Path.glob("*.jinja")`: hidden names too, not sub-folders) is the template NAME, read after it,
  so an additional default.jinja replaces chat_template.jinja;
- if any such file was read, tokenizer_config.json's `chat_template` is not read at all: a lone
  `default` is the template, several make a named set (`templates.template_set`: `tool_use` for
  rows with tools, `default` for the others);
- otherwise tokenizer_config.json's `chat_template` (a string or a list of named templates).

transformers reads only regular files (its cached_file skips a name that is no file): a folder
under such a name is skipped likewise; a link to nothing is refused naming it (folder_files: the
template it stood for would be dropped without a word), and a FIFO or device by kind (read_small),
as packtool refuses every special file it is given.
"""
from __future__ import annotations

import os

from packtool.errors import cli_flag
from packtool.tokenize.folder_files import file_present
from packtool.tokenize.templates import ChatTemplate, read_template_file, template_from_config, template_set

JINJA = "chat_template.jinja"      # transformers' CHAT_TEMPLATE_FILE
EXTRA = "additional_chat_templates"  # transformers' CHAT_TEMPLATE_DIR


def _read(path: str) -> str:
    return read_template_file(path, "fix or remove it", cli_flag("tokenizer"))


def _files(folder: str) -> dict[str, str]:
    """Template name -> its file's path relative to `folder`, in the order transformers reads them."""
    names = [("default", JINJA)]
    extra = os.path.join(folder, EXTRA)
    if os.path.isdir(extra):
        names += sorted((n[:-len(".jinja")], f"{EXTRA}/{n}") for n in os.listdir(extra) if n.endswith(".jinja"))
    found: dict[str, str] = {}
    for name, rel in names:
        path = os.path.join(folder, rel)
        if file_present(path) and not os.path.isdir(path):  # what transformers' cached_file finds
            found[name] = rel
    return found


def folder_template(folder: str | None, conf: dict) -> ChatTemplate | None:
    """The chat template (or named set) a model folder gives; `conf`: its tokenizer_config.json."""
    config = os.path.join(folder, "tokenizer_config.json") if folder else None
    files = _files(folder) if folder else {}
    if not files:
        return template_from_config(conf.get("chat_template"), "tokenizer_config.json", cli_flag("tokenizer"), config)
    texts = {name: _read(os.path.join(folder, rel)) for name, rel in files.items()}
    return template_set(texts, files, EXTRA)

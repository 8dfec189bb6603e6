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
under such a name is skipped likewise. An entry packtool cannot read, a link to nothing (a
template file, or the additional_chat_templates folder itself: folder_files names it) or a FIFO
or device (read_small's refusal by kind), is refused where the folder's templates are used
(`refuse_gone`: rows rendered through a template, no --chat-template given): the template it
stood for would be dropped without a word there; a run of text or pre-tokenized rows, or one
given its own template, renders none of them (RA-9; a FIFO was refused for every run: RA-14).
"""
from __future__ import annotations

import os

from packtool.errors import cli_flag
from packtool.errors import PacktoolInputError
from packtool.tokenize.folder_files import link_to_nothing
from packtool.tokenize.templates import ChatTemplate, read_template_file, template_from_config, template_set

JINJA = "chat_template.jinja"      # transformers' CHAT_TEMPLATE_FILE
EXTRA = "additional_chat_templates"  # transformers' CHAT_TEMPLATE_DIR


def _read(path: str) -> str:
    return read_template_file(path, "fix or remove it", cli_flag("tokenizer"))


def _files(folder: str) -> tuple[dict[str, str], PacktoolInputError | None]:
    """Template name -> its file's path relative to `folder`, in the order transformers reads them;
    and the refusal of the first link to nothing among them, if any."""
    names = [("default", JINJA)]
    extra = os.path.join(folder, EXTRA)
    gone = link_to_nothing(extra)
    if os.path.isdir(extra):
        names += sorted((n[:-len(".jinja")], f"{EXTRA}/{n}") for n in os.listdir(extra) if n.endswith(".jinja"))
    found: dict[str, str] = {}
    for name, rel in names:
        path = os.path.join(folder, rel)
        gone = gone or link_to_nothing(path)
        if os.path.isfile(path):  # what transformers' cached_file finds
            found[name] = rel
        elif os.path.exists(path) and not os.path.isdir(path):  # a FIFO or device: unreadable, as a link to nothing
            gone = gone or _refused(path)
    return found, gone


def _refused(path: str) -> PacktoolInputError | None:
    """read_small's refusal of a template file that is a FIFO or device (by kind: nothing is read)."""
    try:
        _read(path)
    except PacktoolInputError as e:
        return e
    return None


def folder_template(folder: str | None, conf: dict) -> tuple[ChatTemplate | None, PacktoolInputError | None]:
    """The chat template (or named set) a model folder gives, from the files there; `conf`: its
    tokenizer_config.json. With it, the refusal of a template's link to nothing (`refuse_gone`)."""
    config = os.path.join(folder, "tokenizer_config.json") if folder else None
    files, gone = _files(folder) if folder else ({}, None)
    if not files:
        return template_from_config(conf.get("chat_template"), "tokenizer_config.json", cli_flag("tokenizer"),
                                    config), gone
    texts = {name: _read(os.path.join(folder, rel)) for name, rel in files.items()}
    return template_set(texts, files, EXTRA), gone


def refuse_gone(gone: PacktoolInputError | None, shapes) -> None:
    """A template link to nothing in the folder whose templates render these rows is refused: the
    template it stood for would be dropped (transformers skips it) and the rows rendered by
    another, or by none. Rows no template renders (text, pre-tokenized) read on."""
    if gone is not None and any(s.templated for s in shapes):
        raise gone

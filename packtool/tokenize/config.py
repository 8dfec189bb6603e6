"""Configuration dataclasses: flags -> these -> library calls."""
from __future__ import annotations

from dataclasses import dataclass, fields

from packtool.errors import PacktoolInputError, arg, bad_choice, cli_flag

SHAPES = ("auto", "tokens", "text", "chat", "sharegpt", "alpaca", "prompt_completion", "fields")


@dataclass(frozen=True)
class TokenizeConfig:
    """How raw rows become token ids and loss masks (the tokenized cache's key, with the inputs).

    None for add_bos/add_eos means "the sensible default for the shape" (see packtool/io/tokenize.py):
    BOS when the tokenizer has one and the rendered text does not already start with it, unless
    its tokenizer_config.json says add_bos_token false (tokenizer_config.ConfigSwitches.settle);
    EOS for text and untemplated prompt/response rows, not for chat (the template ends turns).
    """
    tokenizer: str | None = None          # tokenizer.json or a model folder holding one
    chat_template: str | None = None      # chatml | llama3 | mistral | FILE.jinja | None (folder's)
    shape: str = "auto"                   # one of SHAPES
    prompt_field: str | None = None       # with response_field: any two columns (shape=fields)
    response_field: str | None = None
    text_field: str | None = None         # default "text"
    add_bos: bool | None = None
    add_eos: bool | None = None
    bos_token: str | None = None          # override the tokenizer's special tokens
    eos_token: str | None = None
    pad_token: str | None = None
    prompt_separator: str | None = None   # between prompt and response without a template
    on_empty: str = "error"               # error | skip (skipped rows are counted in cache.json)
    batch_size: int = 1024                # rows per record batch (bounded memory)
    # per-token side columns of pre-tokenized rows, "NAME" or "NAME:DTYPE" (packtool/side.py,
    # tokenize/side_values.py); support_columns are declared sampler-support columns (added
    # to the side columns if not listed): verify checks their rule
    side_columns: tuple[str, ...] = ()
    support_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from packtool.params import check_fields  # PathLike to str, numpy ints to int: JSON in the cache key
        check_fields(self, "tokenizer", "chat_template", "prompt_field", "response_field", "text_field",
                     "add_bos", "add_eos", "bos_token", "eos_token", "pad_token", "prompt_separator",
                     "batch_size", "side_columns", "support_columns")
        if self.shape not in SHAPES:
            raise bad_choice(PacktoolInputError, "shape", self.shape, SHAPES)
        if self.on_empty not in ("error", "skip"):
            raise bad_choice(PacktoolInputError, "on_empty", self.on_empty, ("error", "skip"))
        for name in ("side_columns", "support_columns"):  # check_fields made them tuples (or None)
            object.__setattr__(self, name, getattr(self, name) or ())
        if self.side_columns or self.support_columns:
            from packtool.side import parse_side_spec
            parse_side_spec(self.side_columns, self.support_columns)  # refused here, not mid-pack
        if (self.prompt_field is None) != (self.response_field is None):
            raise PacktoolInputError(f"{arg('prompt_field')} and {arg('response_field')} go together",
                                     flag=cli_flag("prompt_field"))
        self._check_fields_of_shape()

    def _check_fields_of_shape(self) -> None:
        """Field arguments that a forced shape would ignore are an error, not a silent no-op (under
        auto each file picks its own shape, so text_field beside prompt_field is fine)."""
        if self.shape == "auto":
            return
        if self.prompt_field is not None and self.shape != "fields":
            raise PacktoolInputError(f"{arg('shape', self.shape)} ignores {arg('prompt_field')}/{arg('response_field')}: "
                                     f"drop them, or use {arg('shape', 'fields')}", flag=cli_flag("shape"))
        if self.text_field is not None and self.shape != "text":
            raise PacktoolInputError(f"{arg('shape', self.shape)} ignores {arg('text_field')}: drop it, or use "
                                     f"{arg('shape', 'text')}", flag=cli_flag("shape"))

    def as_dict(self) -> dict:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

"""The `packtool` command line: flags -> config dataclasses -> library calls. No logic here."""
from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Alignment-aware sequence packing for Megatron THD training.")
err = Console(stderr=True)

# Flags shared by every subcommand that takes them (DESIGN section 4).
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-C", help="Slab capacity C in tokens.")]
Tp = Annotated[int, typer.Option("--tp", help="Tensor-parallel size.")]
Cp = Annotated[int, typer.Option("--cp", help="Context-parallel size (zigzag, 2*cp chunks per sequence).")]
Sp = Annotated[Optional[bool], typer.Option("--sp/--no-sp", help="Sequence parallelism (default: on when tp>1).")]
Fp8 = Annotated[str, typer.Option("--fp8", help="FP8 recipe: none|tensorwise|mxfp8|blockwise.")]
FixedLength = Annotated[Optional[int], typer.Option("--fixed-length", help="Every slab exactly this long (PP / static shapes).")]
Convention = Annotated[str, typer.Option("--convention", help="Layout rules: packtool|skyrl|nemo-rl|verl|per-sequence.")]
Algorithm = Annotated[str, typer.Option("--algorithm", "-a", help="Packer: ffd|bfd|mffd|balanced.")]
Overflow = Annotated[Optional[str], typer.Option("--overflow", help="Footprint over capacity: error|singleton|truncate|split (default per algorithm).")]
Dp = Annotated[int, typer.Option("--dp", help="Data-parallel ranks: slab count a multiple of dp, compute-balanced steps.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the slab-order shuffle.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


def _fail(e: Exception, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _alignment(max_tokens, tp, cp, sp, fp8, fixed_length, convention):
    from .align import Alignment
    return Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, capacity=max_tokens,
                     fixed_length=fixed_length, convention=convention)


@app.command()
def plan(
    lengths: Annotated[str, typer.Option("--lengths", help="Parquet/Arrow/npy/txt file of integer lengths.")],
    column: Annotated[Optional[str], typer.Option("--column", help="Lengths column (Parquet/Arrow).")] = None,
    max_tokens: MaxTokens = 8192, tp: Tp = 1, cp: Cp = 1, sp: Sp = None, fp8: Fp8 = "none",
    fixed_length: FixedLength = None, convention: Convention = "packtool",
    algorithm: Algorithm = "bfd", overflow: Overflow = None, dp: Dp = 1, seed: Seed = 0,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the plan (one row per segment) to Parquet.")] = None,
    json_out: JsonOut = False,
) -> None:
    """Plan slabs for a list of sequence lengths and print where the padding goes."""
    from .plan import PackingConfig, load_lengths, plan as make_plan, write_plan
    from .report import plan_summary, print_plan_summary
    try:
        align = _alignment(max_tokens, tp, cp, sp, fp8, fixed_length, convention)
        cfg = PackingConfig(algorithm=algorithm, overflow=overflow, dp=dp, seed=seed)
        p = make_plan(load_lengths(lengths, column), align, cfg)
        if output:
            write_plan(p, output)
    except ValueError as e:
        _fail(e)
    summary = plan_summary(p)
    if json_out:
        print(json.dumps(summary.to_dict()))
    else:
        print_plan_summary(summary, Console())


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The `packtool` command line: flags -> config dataclasses -> library calls. No logic here."""
from __future__ import annotations

import functools
import json
import shlex
import sys
import warnings
from contextlib import contextmanager
from typing import Annotated, Optional

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from packtool.cli.failure import (EXIT_INTERRUPTED, ReaderLeft, _StdoutConsole, click_exceptions, committed, fail, guarded, interrupted,
                                  making_source_copy, reader_left, release, reset, set_debug, stdout_console, usage_error, with_notes)
from packtool.cli.inputs import check_input_specs
from packtool.notes import note
from packtool.errors import PacktoolConfigError, bad_choice, spelled_as


class _ParsedHere:
    """click raises some usage errors without the context that names the command (a flag missing
    its value: `pack data.jsonl -C`), so they lacked the `--help` hint the others carry; and it
    takes the next flag as a missing value (`-C --json`): both end as the one usage error here."""

    def parse_args(self, ctx, args):
        self._refuse_flag_as_value(ctx, args)
        try:
            return super().parse_args(ctx, args)
        except click_exceptions.UsageError as e:
            e.ctx = e.ctx or ctx
            raise

    def _refuse_flag_as_value(self, ctx, args: list[str]) -> None:
        opts = {o: p for p in self.get_params(ctx) if p.param_type_name == "option"
                for o in (*p.opts, *p.secondary_opts)}
        for i, a in enumerate(args[:-1]):
            if a == "--":
                return
            p = opts.get(a)
            if p is not None and not p.is_flag and not p.count and args[i + 1] in opts:
                raise click_exceptions.BadOptionUsage(a, f"Option {a!r} requires an argument.", ctx=ctx)


class _Command(_ParsedHere, TyperCommand):
    pass


class _Commands(_ParsedHere, TyperGroup):
    """Every way a command line can end goes through failure.py: a usage error (unknown flag,
    bad value) is the README's one `error:` line (a JSON object too under --json), not click's
    boxed usage text; Ctrl-C while the flags are parsed says so, as it does in a command."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        given = list(sys.argv[1:] if args is None else args)
        json_out = "--json" in given
        reset(next((a for a in given if a in self.commands), None))
        # typer prints --help through consoles of its own: they end a closed pipe as ours do
        Console.on_broken_pipe = _StdoutConsole.on_broken_pipe
        try:
            argv = self._json_after_command(given)
            with spelled_as(FLAG_OF):  # the library's checks name the flags the user typed
                rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except ReaderLeft:  # `packtool pack --help | head`: the reader left; SIGPIPE's status
            code = reader_left()
        except getattr(click_exceptions, "NoArgsIsHelpError", ()) as e:  # bare `packtool`: the help
            print(e.ctx.get_help())
            code = e.exit_code
        except click_exceptions.ClickException as e:
            code = usage_error(e, json_out)
        except (getattr(click_exceptions, "Abort", typer.Abort), typer.Abort, KeyboardInterrupt):
            code = EXIT_INTERRUPTED
        finally:
            release()
        if code == EXIT_INTERRUPTED:  # typer ends a Ctrl-C outside a command in silence
            code = interrupted(json_out)  # 143 when it was SIGTERM
        if not standalone_mode:
            return code
        sys.exit(code)


    def _json_after_command(self, argv: list[str]) -> list[str]:
        """`packtool --json pack ...` as `packtool pack --json ...` (as --debug goes either
        side): --json belongs to the subcommand, which takes it wherever the user put it. A
        subcommand without --json (train) keeps click's one-line 'no such option'."""
        at = next((i for i, a in enumerate(argv) if a in self.commands), None)
        if at is None and "--json" in argv:  # no command: the error is about what is there instead
            rest = [a for a in argv if a != "--json"]
            if not rest:
                raise click_exceptions.UsageError("Missing command.", ctx=self.context_class(self, info_name="packtool"))
            return rest
        if at is None or "--json" not in argv[:at]:
            return argv
        if not any("--json" in getattr(p, "opts", ()) for p in self.commands[argv[at]].params):
            return argv
        return [a for a in argv[:at] if a != "--json"] + [argv[at], "--json"] + argv[at + 1:]


app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Alignment-aware sequence packing for Megatron THD training.")

# The flag that sets each library argument: a library check names the argument (`capacity`),
# the command line this flag (errors.arg / spelled_as). Only arguments whose flag is not the
# argument's own name with dashes need to differ, but every one a check names is listed.
FLAG_OF = {"capacity": "--max-tokens", "tp": "--tp", "cp": "--cp", "sp": "--sp", "fp8": "--fp8",
           "fixed_length": "--fixed-length", "convention": "--convention", "algorithm": "--algorithm",
           "overflow": "--overflow", "dp": "--dp", "seed": "--seed", "workers": "--workers",
           "plan_shard_rows": "--plan-shard-rows", "output": "--output", "overwrite": "--overwrite",
           "dry_run": "--dry-run", "cache_dir": "--cache-dir", "engine": "--engine", "tokenizer": "--tokenizer",
           "chat_template": "--chat-template", "shape": "--shape", "prompt_field": "--prompt-field",
           "response_field": "--response-field", "text_field": "--text-field", "add_eos": "--eos",
           "on_empty": "--on-empty", "side_columns": "--side-columns", "support_columns": "--support-columns",
           "split": "--split", "config": "--config", "lengths": "--lengths", "column": "--column",
           "plan": "--plan", "html": "--html", "save": "--save", "load": "--load", "json_log": "--json-log",
           "shard_tokens": "--shard-tokens", "max_problems": "--max-problems", "device": "--device",
           "lm_head": "--lm-head", "micro_batch_tokens": "--micro-batch-tokens", "grad_accum": "--grad-accum",
           "layers": "--layers", "hidden": "--hidden", "heads": "--heads", "ffn": "--ffn"}  # train's too  # their ranges: params.RANGES

# Flags shared by every subcommand that takes them (docs/DESIGN.md §8).
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-C", help="Slab capacity C in tokens.")]
Tp = Annotated[int, typer.Option("--tp", help="Tensor-parallel size.")]
Cp = Annotated[int, typer.Option("--cp", help="Context-parallel size (zigzag, 2*cp chunks per sequence).")]
Sp = Annotated[Optional[bool], typer.Option("--sp/--no-sp", help="Sequence parallelism (default: on when tp>1; with --tp 1 it is off, as in megatron-core).")]
Fp8 = Annotated[str, typer.Option("--fp8", help="FP8 recipe: none, tensorwise, mxfp8 or blockwise.")]
FixedLength = Annotated[Optional[int], typer.Option("--fixed-length", help="Every slab exactly this long (PP / static shapes).")]
Convention = Annotated[str, typer.Option("--convention", help="Layout rules: packtool, skyrl, nemo-rl, verl or per-sequence.")]
Algorithm = Annotated[str, typer.Option("--algorithm", "-a", help="Packer: ffd, bfd, mffd or balanced.")]
Overflow = Annotated[Optional[str], typer.Option("--overflow", help="Footprint over capacity: error, singleton, truncate or split (default per algorithm).")]
Dp = Annotated[int, typer.Option("--dp", help="Data-parallel ranks: slab count a multiple of dp, compute-balanced steps.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the slab-order shuffle.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", "--no-progress", help="No progress bar (pack's spelling works too).")]
# Tokenization flags, shared by `pack` and `verify --source`.
Tokenizer = Annotated[Optional[str], typer.Option("--tokenizer", help="tokenizer.json or a model folder (no hub).")]
ChatTemplate = Annotated[Optional[str], typer.Option("--chat-template", help="chatml, llama3, mistral, none or a FILE.jinja (default: the folder's).")]
Shape = Annotated[Optional[str], typer.Option("--shape", help="One of auto, tokens, text, chat, sharegpt, alpaca, prompt_completion, fields (default auto).")]
PromptField = Annotated[Optional[str], typer.Option("--prompt-field", help="Prompt column of any two-field data (with --response-field).")]
ResponseField = Annotated[Optional[str], typer.Option("--response-field")]
TextField = Annotated[Optional[str], typer.Option("--text-field", help="Text column (default: text).")]
AddBos = Annotated[Optional[bool], typer.Option("--bos/--no-bos", help="Prepend BOS (default per shape).")]
AddEos = Annotated[Optional[bool], typer.Option("--eos/--no-eos", help="Append EOS (default per shape).")]
OnEmpty = Annotated[Optional[str], typer.Option("--on-empty", help="Empty or all-masked rows: error or skip (skips are counted; default error).")]
CacheDir = Annotated[Optional[str], typer.Option("--cache-dir", help="Tokenized cache root (default ~/.cache/packtool), or an object-store URI (s3://bucket/cache) shared by every machine: entries are pulled into a local mirror, new ones pushed with cache.json last.")]


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Print the traceback of an error (also PACKTOOL_DEBUG=1).")] = False) -> None:
    set_debug(debug)


@contextmanager
def _rows_of(lengths_file: str):
    """A planner's "sequence N" is row N of the --lengths file: say so."""
    from packtool.planning.core import PlanError, SequenceError
    try:
        yield
    except SequenceError as e:
        raise PlanError(e.detail, path=lengths_file, row=e.sequence) from None


def _alignment(max_tokens, tp, cp, sp, fp8, fixed_length, convention):
    from packtool.align import Alignment, sp_note
    a = Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, capacity=max_tokens,
                  fixed_length=fixed_length, convention=convention)
    said = sp_note(tp, sp)
    if said:
        note(said, label="note")
    return a


@app.command(cls=_Command)
@guarded
def plan(
    lengths: Annotated[str, typer.Option("--lengths", help="File of integer lengths: Parquet, Arrow/Feather, .jsonl, .csv/.tsv, .npy or .txt (one per line).")],
    column: Annotated[Optional[str], typer.Option("--column", help="Lengths column (default: the one named length, lengths, num_tokens, seq_len or n_tokens; or the only column).")] = None,
    max_tokens: MaxTokens = 8192, tp: Tp = 1, cp: Cp = 1, sp: Sp = None, fp8: Fp8 = "none",
    fixed_length: FixedLength = None, convention: Convention = "packtool",
    algorithm: Algorithm = "bfd", overflow: Overflow = None, dp: Dp = 1, seed: Seed = 0,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the plan (one row per segment) to Parquet.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --output file.")] = False,
    json_out: JsonOut = False,
) -> None:
    """Plan slabs for a list of sequence lengths and print where the padding goes."""
    from packtool.cli.printing import print_plan_summary
    from packtool.planning.core import PackingConfig
    from packtool.planning.lengths import load_lengths
    from packtool.planning.plan_file import write_plan
    from packtool.planning.core import plan as make_plan
    from packtool.planning.summary import plan_summary
    try:
        if output:  # before any work
            from packtool.output import check_new_file
            from packtool.output.folder import refuse_inside_packed
            refuse_inside_packed(check_new_file(output, "output", replace=overwrite, inputs=[lengths]), "output")
        align = _alignment(max_tokens, tp, cp, sp, fp8, fixed_length, convention)
        cfg = PackingConfig(algorithm=algorithm, overflow=overflow, dp=dp, seed=seed)
        with _rows_of(lengths):
            p = make_plan(load_lengths(lengths, column), align, cfg)
        if output:
            write_plan(p, output, overwrite, inputs=[lengths])
    except Exception as e:
        fail(e, json_out)
    committed()  # the result is decided: Ctrl-C from here on changes nothing
    summary = plan_summary(p)
    if json_out:
        print(json.dumps(with_notes(summary.to_dict())))
    else:
        print_plan_summary(summary, stdout_console())


def _unescape(text: str | None) -> str | None:
    r"""`--prompt-separator '\n\n'` as typed in a shell: backslash-n and -t are the characters."""
    return None if text is None else text.replace("\\n", "\n").replace("\\t", "\t")


@app.command(cls=_Command)
@guarded
def pack(
    inputs: Annotated[list[str], typer.Argument(help="Input files, folders or globs (Parquet, JSON Lines [.gz/.zst/.bz2], JSON, Arrow, CSV/TSV, datasets folder).")],
    tokenizer: Tokenizer = None, chat_template: ChatTemplate = None, shape: Shape = None,
    prompt_field: PromptField = None, response_field: ResponseField = None,
    text_field: TextField = None, add_bos: AddBos = None, add_eos: AddEos = None,
    on_empty: OnEmpty = None,
    prompt_separator: Annotated[Optional[str], typer.Option("--prompt-separator", help="Text between the prompt and the response of two-field rows without a chat template (default a newline; '' for none; \\n and \\t are read as newline and tab).")] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Output directory, or an object-store prefix (s3://bucket/packed; gs://, abfs://, hdfs://) committed by writing the manifest last (FORMAT.md, 'Object storage'). Credentials come from the store's standard chain (AWS_* variables, AWS_ENDPOINT_URL, profiles, instance roles).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing output (only once the new one is complete).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Tokenize (cached) and print the plan; write nothing.")] = False,
    cache_dir: CacheDir = None,
    max_tokens: MaxTokens = 8192, tp: Tp = 1, cp: Cp = 1, sp: Sp = None, fp8: Fp8 = "none",
    fixed_length: FixedLength = None, convention: Convention = "packtool",
    algorithm: Algorithm = "bfd", overflow: Overflow = None, dp: Dp = 1, seed: Seed = 0,
    json_out: JsonOut = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", " /-q", help="Progress bars on stderr (tokenizing, writing); -q = --no-progress.")] = True,
    shard_tokens: Annotated[int, typer.Option("--shard-tokens", help="About this many tokens per Parquet shard file (default 67108864); shards end on whole slabs, in multiples of 4 above 4Mi tokens.")] = 64 << 20,
    workers: Annotated[Optional[int], typer.Option("--workers", help="Shard-writer threads (default: one per core; 1 keeps memory lowest).")] = None,
    engine: Annotated[str, typer.Option("--engine", help="local|ray: ray reads, tokenizes and writes on a Ray cluster (extra: packtool\\[ray]).")] = "local",
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", help="Ray cluster to join (default with --engine ray: a local Ray on this machine's cores).")] = None,
    split: Annotated[Optional[str], typer.Option("--split", help="Hugging Face dataset split (a dataset name, or a local dataset repo folder, read with datasets.load_dataset; extra: packtool\\[hf]).")] = None,
    config: Annotated[Optional[str], typer.Option("--config", help="Hugging Face dataset configuration (with a dataset name or repo folder).")] = None,
    plan_shard_rows: Annotated[Optional[int], typer.Option("--plan-shard-rows", help="Plan in shards of N rows, then merge their underfull bins (any extra bins are reported); 0 plans every row at once in memory. Local engine: default 131072 (1<<17), placements spill to disk beside the output so memory does not grow with the rows, and inputs of at most N rows get exactly the global plan. Ray engine: the same default and the same bytes; shards run as Ray tasks and the driver holds per-bin arrays only.")] = None,
    side_columns: Annotated[Optional[str], typer.Option("--side-columns", help="Per-token side columns of pre-tokenized rows to keep, NAME[:DTYPE][,NAME...]: a list per row as long as input_ids (one value per token) or a list of K-long lists (K values per token); DTYPE (float32, float64, int32 or int64) pins the type. Pads hold 0.0 (floats) or -1 (ints). FORMAT.md, Side columns.")] = None,
    support_columns: Annotated[Optional[str], typer.Option("--support-columns", help="Side columns that hold the sampler's support per token (int ids, -1 padded at the end, the token present exactly once); verify checks that rule. Added to --side-columns.")] = None,
) -> None:
    """Tokenize (cached), plan and write alignment-aware Parquet slabs plus a manifest."""
    from packtool.cli.printing import print_plan_summary
    from packtool.planning.core import PackingConfig
    from packtool.tokenize import hf_input as _hf
    from packtool.tokenize.config import TokenizeConfig
    try:
        align = _alignment(max_tokens, tp, cp, sp, fp8, fixed_length, convention)
        cfg = PackingConfig(algorithm=algorithm, overflow=overflow, dp=dp, seed=seed)
        tok = TokenizeConfig(tokenizer=tokenizer, chat_template=chat_template,
                             shape=shape or "auto", prompt_field=prompt_field,
                             response_field=response_field, text_field=text_field,
                             add_bos=add_bos, add_eos=add_eos, on_empty=on_empty or "error",
                             prompt_separator=_unescape(prompt_separator),
                             side_columns=side_columns,
                             support_columns=support_columns)
        if engine not in ("local", "ray"):
            raise bad_choice(PacktoolConfigError, "engine", engine, ("local", "ray"))
        if engine == "ray":
            from packtool.engines import pack_ray as run_pack
            from packtool.params import checked
            checked("workers", workers)  # pack_ray has no workers= (its writers are Ray tasks)
            kw = dict(ray_address=ray_address, plan_shard_rows=plan_shard_rows)
        else:
            from packtool.packing import pack as run_pack
            kw = dict(workers=workers, plan_shard_rows=plan_shard_rows)
        check_input_specs(inputs, split or config)
        if split or config or (len(inputs) == 1 and _hf.is_dataset_name(inputs[0])):
            if len(inputs) != 1 or engine != "local":
                raise ValueError("a dataset name or --split/--config takes one name or folder (--engine local)")
            inputs = _hf.load_dataset(inputs[0], split, config)
        res = run_pack(inputs, align, cfg, tok, output=output, overwrite=overwrite,
                       dry_run=dry_run, cache_dir=cache_dir, progress=progress and not json_out,
                       shard_tokens=shard_tokens, **kw)
    except Exception as e:
        fail(e, json_out)
    committed()  # the result is decided: Ctrl-C from here on changes nothing
    if json_out:
        d = res.summary.to_dict()
        d.update(output=res.output, shards=len(res.shards), loss_tokens=res.loss_tokens,
                 tokenize_seconds=res.tokenize_seconds, write_seconds=res.write_seconds)
        if hasattr(res.plan, "stats"):
            d["sharded_plan"] = res.plan.stats.to_dict()
        print(json.dumps(with_notes(d)))
        return
    con = stdout_console()
    print_plan_summary(res.summary, con)
    if hasattr(res.plan, "stats") and res.plan.stats.shards > 1:  # one shard: the global plan
        st = res.plan.stats
        con.print(f"Sharded plan: {st.shards} shards, {st.merged_items:,} items merged, "
                  f"{st.extra_bins:+,} bins over the lower bound {st.lower_bound:,}")
    if dry_run and output:  # said, so that a finished run with -o is never taken for a written one
        con.print(f"--dry-run: nothing was written; {output} is left as it was", markup=False, highlight=False,
                  soft_wrap=True)
    if res.output:
        mb = sum(s.bytes for s in res.shards) / 1e6
        q = shlex.quote(res.output)  # the two commands must paste as they are (spaces, brackets)
        con.print(f"Done: {res.output} — {len(res.shards)} shard(s), {mb:.1f} MB. "
                  f"Check it with `packtool verify {q}`, look with `packtool inspect {q}`.",
                  markup=False, highlight=False, soft_wrap=True)  # the terminal wraps: commands paste whole


@app.command(cls=_Command)
@guarded
def inspect(
    directory: Annotated[Optional[str], typer.Argument(help="Packed output directory (or use --lengths / --plan).")] = None,
    lengths: Annotated[Optional[str], typer.Option("--lengths", help="File of integer lengths (before packing): Parquet, Arrow/Feather, .jsonl, .csv/.tsv, .npy or .txt.")] = None,
    plan_file: Annotated[Optional[str], typer.Option("--plan", help="Plan Parquet from `packtool plan --output` (it records the flags plan used).")] = None,
    column: Annotated[Optional[str], typer.Option("--column", help="Lengths column (default: the one named length, lengths, num_tokens, seq_len or n_tokens; or the only column).")] = None,
    max_tokens: MaxTokens = 8192, tp: Tp = 1, cp: Cp = 1, sp: Sp = None, fp8: Fp8 = "none",
    fixed_length: FixedLength = None, convention: Convention = "packtool",
    algorithm: Algorithm = "bfd", overflow: Overflow = None, dp: Dp = 1, seed: Seed = 0,
    compare: Annotated[bool, typer.Option("--compare", help="Also plan the same lengths with every algorithm and convention.")] = False,
    what_if: Annotated[bool, typer.Option("--what-if/--no-what-if", help="Try nearby capacities for less padding.")] = True,
    html: Annotated[Optional[str], typer.Option("--html", help="Write a self-contained HTML report (inline SVG) to FILE.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --html file.")] = False,
    json_out: JsonOut = False, quiet: Quiet = False,
) -> None:
    """Where the tokens and the padding went: a packed output, a plan file, or lengths before packing."""
    from packtool.cli.printing import print_inspect_report
    from packtool.inspection.packed import inspect_packed
    from packtool.inspection.planned import inspect_lengths, inspect_plan_file
    if sum(x is not None for x in (directory, lengths, plan_file)) != 1:
        fail("give exactly one of DIR, --lengths FILE or --plan FILE", json_out)
    try:
        read = [p for p in (directory, lengths, plan_file) if p is not None]
        if html:
            from packtool.inspection.html import check_html_path
            check_html_path(html, overwrite, read)
        if directory is not None:
            report = inspect_packed(directory, compare=compare, what_if=what_if,
                                    progress=not (json_out or quiet))
        else:
            from packtool.planning.core import PackingConfig
            from packtool.planning.lengths import load_lengths
            align = _alignment(max_tokens, tp, cp, sp, fp8, fixed_length, convention)
            cfg = PackingConfig(algorithm=algorithm, overflow=overflow, dp=dp, seed=seed)
            if lengths is not None:
                with _rows_of(lengths):
                    report = inspect_lengths(load_lengths(lengths, column), align, cfg, compare=compare,
                                             what_if=what_if, path=lengths)
            else:
                from packtool.align import Alignment
                given = (align, cfg) != (Alignment(), PackingConfig())  # else: the file's own
                report = inspect_plan_file(plan_file, align if given else None, cfg if given else None,
                                           compare=compare, what_if=what_if)
        if html:
            from packtool.inspection.html import write_html
            write_html(report, html, overwrite, read)
    except Exception as e:
        fail(e, json_out)
    committed()  # the result is decided: Ctrl-C from here on changes nothing
    if plan_file is not None:  # say which settings the figures rest on (in --json's notes too)
        from packtool.planning.plan_file import plan_flags, read_plan_config
        stored = read_plan_config(plan_file)
        note(f"settings recorded in the plan file: {plan_flags(*stored)}" if stored else
             f"this plan file records no settings (an older packtool); these figures assume "
             f"{plan_flags(align, cfg)}: pass the flags `plan` used", label="note")
    if json_out:
        print(json.dumps(with_notes(report.to_dict())))
    else:
        print_inspect_report(report, stdout_console())
        if html:
            stdout_console().print(f"HTML report: {html}", markup=False, highlight=False)


def _verify_args(directory: str, source: list[str] | None, more: list[str] | None, json_out: bool):
    """`verify DIR --source a.jsonl b.jsonl` (what a shell glob after --source gives): the
    arguments after the first --source value are more sources. Given before DIR
    (`verify --source a b DIR`), the folder is the last argument."""
    if not more:
        return directory, source
    if not source:
        fail(f"unexpected extra argument(s) {' '.join(more)}: give one output folder; inputs to "
             f"compare go after --source", json_out)
    import os
    if not os.path.isdir(directory) and os.path.isdir(more[-1]):
        return more[-1], [*source, directory, *more[:-1]]
    return directory, [*source, *more]


@app.command(cls=_Command)
@guarded
def verify(
    directory: Annotated[str, typer.Argument(help="Packed output directory (slabs-*.parquet + .manifest.json).")],
    source: Annotated[Optional[list[str]], typer.Option("--source", help="The inputs that were packed (repeat); compares every segment's tokens.")] = None,
    tokenizer: Tokenizer = None, chat_template: ChatTemplate = None, shape: Shape = None,
    prompt_field: PromptField = None, response_field: ResponseField = None,
    text_field: TextField = None, add_bos: AddBos = None, add_eos: AddEos = None,
    on_empty: OnEmpty = None, cache_dir: CacheDir = None,
    workers: Annotated[Optional[int], typer.Option("--workers", help="Processes (default: every core).")] = None,
    max_problems: Annotated[int, typer.Option("--max-problems", help="Problems listed per check (all are counted).")] = 20,
    json_out: JsonOut = False, quiet: Quiet = False,
    more: Annotated[Optional[list[str]], typer.Argument(hidden=True)] = None,
) -> None:
    """Check a packed output: every FORMAT.md invariant; with --source, every token. Exit 0 if all hold, 1 if not."""
    from packtool.cli.printing import print_verify_report
    from packtool.verification.run import source_store, source_tokenize_for
    from packtool.verification.run import verify as run_verify
    flat = fingerprint = None
    directory, source = _verify_args(directory, source, more, json_out)
    try:
        tok = None
        if source:
            tok = source_tokenize_for(directory, tokenizer=tokenizer, chat_template=chat_template,
                                      shape=shape, prompt_field=prompt_field, response_field=response_field,
                                      text_field=text_field, add_bos=add_bos, add_eos=add_eos,
                                      on_empty=on_empty)
            if tok is None:  # verify reports the damage (exit 1, as without --source)
                note(f"{directory}: its manifest is damaged, so --source was not compared", label="note")
                source = None
        if source:
            making_source_copy()
            flat, fingerprint = source_store(source, tok, cache_dir=cache_dir,
                                             progress=not (json_out or quiet))
        files = None
        if source:
            from packtool.tokenize.readers import resolve_inputs
            files = [f.path for f in resolve_inputs(list(source))]
        report = run_verify(directory, flat, workers=workers, max_problems=max_problems,
                            source_fingerprint=fingerprint, progress=not (json_out or quiet),
                            source_tokenize=tok, source_files=files)
    except Exception as e:
        fail(e, json_out)
    committed()  # the result is decided: Ctrl-C from here on changes nothing
    if json_out:
        print(json.dumps(with_notes(report.to_dict()), default=str))
    else:
        print_verify_report(report, stdout_console())
    raise typer.Exit(0 if report.ok else 1)


from packtool.megatron.train_cli import train_command  # noqa: E402  (imports no torch until run)


def _without_backend_notices(fn):
    """megatron-core 0.16 warns that Apex / Transformer Engine are not installed and that its own
    default cuda_graph_scope "full" is deprecated (8 lines on every run); packtool's trainer uses
    neither backend nor sets the scope, so these notices say nothing a user can act on."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*(Apex|Transformer Engine).* (is|are) not installed",
                                    category=UserWarning)
            warnings.filterwarnings("ignore", message="full scope is deprecated", category=UserWarning)
            return fn(*args, **kwargs)
    return wrapper


app.command("train", cls=_Command)(guarded(_without_backend_notices(train_command)))


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

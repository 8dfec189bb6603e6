"""The `packtool` command line: flags -> config dataclasses -> library calls. No logic here.

The subcommands and their own flags; the flags several share and `FLAG_OF` are `flags`',
how a command line is parsed and how a usage error ends is `parsing`'s.
"""
from __future__ import annotations

import functools
import json
import sys
import warnings
from contextlib import contextmanager, nullcontext
from typing import Annotated, Optional

import typer

from packtool.cli.failure import committed, fail, guarded, making_source_copy, set_debug, stdout_console, with_notes
from packtool.cli.flags import (
    FLAG_OF,  # noqa: F401  (README names packtool.cli.app.FLAG_OF)
    AddBos,
    AddEos,
    Algorithm,
    CacheDir,
    ChatTemplate,
    Convention,
    Cp,
    Dp,
    FixedLength,
    Fp8,
    JsonOut,
    MaxTokens,
    OnEmpty,
    Overflow,
    PromptField,
    Quiet,
    ResponseField,
    Seed,
    Shape,
    Sp,
    TextField,
    Tokenizer,
    Tp,
)
from packtool.cli.inputs import by_datasets, check_input_specs
from packtool.cli.parsing import Command, Commands
from packtool.errors import PacktoolConfigError, bad_choice, shown
from packtool.notes import note

app = typer.Typer(cls=Commands, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Alignment-aware sequence packing for Megatron THD training.")


def _say_version(ctx: typer.Context, given: bool) -> None:
    """`packtool --version`: the version a manifest records as packtool_version, then exit 0;
    under --json (either side of it) as the one JSON object every --json run prints."""
    if given:
        from packtool import __version__
        if getattr(ctx.find_root().command, "json_out", False):
            print(json.dumps(with_notes({"packtool_version": __version__})))
        else:
            print(f"packtool {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Print the traceback of an error (also PACKTOOL_DEBUG=1).")] = False,
          version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_say_version,
                                                help="Print packtool's version and exit.")] = False) -> None:
    set_debug(debug)


@contextmanager
def _rows_of(lengths_file: str):
    """A planner's "sequence N" is row N of the --lengths file: say so. An error about the file
    (a null length, no lengths) names --lengths as its flag, for --json's `flag`."""
    from packtool.errors import PacktoolError
    from packtool.planning.core import PlanError, SequenceError
    try:
        yield
    except SequenceError as e:
        raise PlanError(e.detail, path=lengths_file, row=e.sequence, flag="--lengths") from None
    except PacktoolError as e:
        if e.flag is None and (e.path == lengths_file or str(e).startswith(f"{shown(lengths_file)}:")):
            e.flag = "--lengths"
        raise


def _alignment(max_tokens, tp, cp, sp, fp8, fixed_length, convention):
    from packtool.align import Alignment, sp_note
    a = Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, capacity=max_tokens,
                  fixed_length=fixed_length, convention=convention)
    said = sp_note(tp, sp)
    if said:
        note(said, label="note")
    return a


@app.command(cls=Command)
@guarded
def plan(
    lengths: Annotated[str, typer.Option("--lengths", help="File of integer lengths: Parquet, Arrow/Feather, .jsonl, .csv/.tsv, .npy or .txt (one per line).")],
    column: Annotated[Optional[str], typer.Option("--column", help="Lengths column (default: the one named length, lengths, num_tokens, seq_len or n_tokens; or the only column).")] = None,
    max_tokens: MaxTokens = 8192, tp: Tp = 1, cp: Cp = 1, sp: Sp = None, fp8: Fp8 = "none",
    fixed_length: FixedLength = None, convention: Convention = "packtool",
    algorithm: Algorithm = "bfd", overflow: Overflow = None, dp: Dp = 1, seed: Seed = 0,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the plan (one row per segment) to Parquet.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --output file.")] = False,
    json_out: JsonOut = False, quiet: Quiet = False,  # no progress bar to hide: taken as by every command
) -> None:
    """Plan slabs for a list of sequence lengths and print where the padding goes."""
    from packtool.cli.printing import print_plan_summary
    from packtool.planning.core import PackingConfig
    from packtool.planning.core import plan as make_plan
    from packtool.planning.lengths import load_lengths
    from packtool.planning.plan_file import holding_plan_path, write_plan
    from packtool.planning.summary import plan_summary, with_lengths
    try:  # --output checked before any work and held to its end (a second run is refused)
        from packtool.output.paths import refuse_inside_packed  # as typed (the resolved path beside it)
        with holding_plan_path(output, overwrite, [lengths], lambda: refuse_inside_packed(output, "output")) \
                if output else nullcontext():
            align = _alignment(max_tokens, tp, cp, sp, fp8, fixed_length, convention)
            cfg = PackingConfig(algorithm=algorithm, overflow=overflow, dp=dp, seed=seed)
            with _rows_of(lengths):
                p = make_plan(given := load_lengths(lengths, column), align, cfg)
            if output:
                write_plan(p, output, overwrite, inputs=[lengths])
    except Exception as e:
        fail(e, json_out)
    committed()  # the result is decided: Ctrl-C from here on changes nothing
    summary = with_lengths(plan_summary(p), given, lengths)  # its rows of one token, as pack counts them
    if json_out:
        print(json.dumps(with_notes(summary.to_dict())))
    else:
        print_plan_summary(summary, stdout_console())


def _unescape(text: str | None) -> str | None:
    r"""`--prompt-separator '\n\n'` as typed in a shell: backslash-n and -t are the characters."""
    return None if text is None else text.replace("\\n", "\n").replace("\\t", "\t")


@app.command(cls=Command)
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
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", help="Ray cluster to join, asked once within 20 s before any work (default with --engine ray: RAY_ADDRESS if set, else a local Ray on this machine's cores).")] = None,
    split: Annotated[Optional[str], typer.Option("--split", help="Hugging Face dataset split (a dataset name, or a local dataset repo folder, read with datasets.load_dataset; extra: packtool\\[hf]).")] = None,
    config: Annotated[Optional[str], typer.Option("--config", help="Hugging Face dataset configuration (with a dataset name or repo folder).")] = None,
    plan_shard_rows: Annotated[Optional[int], typer.Option("--plan-shard-rows", help="Plan in shards of N rows, then merge their underfull bins (any extra bins are reported); 0 plans every row at once in memory. Local engine: default 131072 (1<<17), placements spill to disk beside the output so memory does not grow with the rows, and inputs of at most N rows get exactly the global plan. Ray engine: the same default and the same bytes; shards run as Ray tasks and the driver holds per-bin arrays only.")] = None,
    side_columns: Annotated[Optional[str], typer.Option("--side-columns", help="Per-token side columns of pre-tokenized rows to keep, NAME[:DTYPE][,NAME...]: a list per row as long as input_ids (one value per token) or a list of K-long lists (K values per token); DTYPE (float32, float64, int32 or int64) pins the type. Pads hold 0.0 (floats) or -1 (ints). FORMAT.md, Side columns.")] = None,
    support_columns: Annotated[Optional[str], typer.Option("--support-columns", help="Side columns that hold the sampler's support per token (distinct int ids below the vocabulary size, -1 padded at the end, the token present exactly once); verify checks that rule. Added to --side-columns.")] = None,
) -> None:
    """Tokenize (cached), plan and write alignment-aware Parquet slabs plus a manifest."""
    from packtool.cli.printing import pasteable, print_plan_summary
    from packtool.planning.core import PackingConfig
    from packtool.tokenize import hub_load as _hf
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
            inputs, kw["split"], kw["config"] = by_datasets(inputs, split, config, engine)
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
        con.print(f"--dry-run: nothing was written; {shown(output)} is left as it was", markup=False, highlight=False,
                  soft_wrap=True)
    if res.output:
        mb = sum(s.bytes for s in res.shards) / 1e6
        q = pasteable(res.output)  # the two commands must paste as they are (spaces, brackets, controls)
        con.print(f"Done: {shown(res.output)} — {len(res.shards)} shard(s), {mb:.1f} MB. "
                  f"Check it with `packtool verify {q}`, look with `packtool inspect {q}`.",
                  markup=False, highlight=False, soft_wrap=True)  # the terminal wraps: commands paste whole


@app.command(cls=Command)
@guarded
def inspect(
    ctx: typer.Context,
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
    given = [n for n, v in (("DIR", directory), ("--lengths", lengths), ("--plan", plan_file)) if v is not None]
    if len(given) != 1:
        fail(f"give exactly one of DIR, --lengths FILE or --plan FILE{' (given: ' + ', '.join(given) + ')' if given else ''}",
             json_out, flag=next((g for g in given if g != "DIR"), None))
    try:  # --html checked before any work and held to its end (a second run is refused)
        read = [p for p in (directory, lengths, plan_file) if p is not None]
        from packtool.inspection.html import holding_html_path
        with holding_html_path(html, overwrite, read) if html else nullcontext():
            # only the flags typed: a default is no choice to hold a record to (S36-7); DIR and --plan
            # record every setting, so a typed one must be theirs (S39-5: DIR ignored them)
            typed = {k: v for k, v in dict(capacity=max_tokens, tp=tp, cp=cp, sp=sp, fp8=fp8,
                                           fixed_length=fixed_length, convention=convention,
                                           algorithm=algorithm, overflow=overflow, dp=dp, seed=seed).items()
                     if getattr(ctx.get_parameter_source("max_tokens" if k == "capacity" else k),
                                "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")}
            if directory is not None:
                report = inspect_packed(directory, compare=compare, what_if=what_if,
                                        progress=not (json_out or quiet), given=typed)
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
                    report = inspect_plan_file(plan_file, compare=compare, what_if=what_if, given=typed)
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
            stdout_console().print(f"HTML report: {shown(html)}", markup=False, highlight=False)


@app.command(cls=Command)
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
) -> None:
    """Check a packed output: every FORMAT.md invariant; with --source, every token. Exit 0 if all hold, 1 if not."""
    from packtool.cli.printing import print_verify_report
    from packtool.verification.run import verify as run_verify
    from packtool.verification.source import source_store, source_tokenize_for
    flat = fingerprint = None  # `verify --source a b DIR`: cli.variadic put DIR here
    try:
        tok = None
        if source:
            tok = source_tokenize_for(directory, tokenizer=tokenizer, chat_template=chat_template,
                                      shape=shape, prompt_field=prompt_field, response_field=response_field,
                                      text_field=text_field, add_bos=add_bos, add_eos=add_eos,
                                      on_empty=on_empty)
            if tok is None:  # verify reports why (exit 1, as without --source): say which it was
                from packtool.manifest_name import manifest_named
                why = ("its manifest is unusable (the manifest check says why)" if manifest_named(directory)
                       else "it has no manifest")
                note(f"{directory}: {why}, so --source was not compared", label="note")
                source = None
        if source:
            check_input_specs(list(source), True, name="source")
            from packtool.output.folder import check_cache_dir
            cache_dir = check_cache_dir(cache_dir, source)
            making_source_copy()
            flat, fingerprint = source_store(source, tok, cache_dir=cache_dir,
                                             progress=not (json_out or quiet))
        files = None
        if source:
            from packtool.tokenize.readers import resolve_inputs
            files = [f.path for f in resolve_inputs(list(source), quiet=True)]  # noted when tokenized
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


def _json_result(fn):
    """train's --json: its result as one JSON object with the notes it said, as every command's;
    the step table is off (train_command runs quiet) so stdout holds the object alone."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        rv = fn(*args, **kwargs)
        if kwargs.get("json_out") and rv is not None:
            from packtool.megatron.loop import _run_rank
            if _run_rank() == 0:  # torchrun's other ranks ran the same run: one object
                print(json.dumps(with_notes(rv)))
    return wrapper


app.command("train", cls=Command)(guarded(_json_result(_without_backend_notices(train_command))))


def main() -> None:
    # the subcommand known from the first line: a Ctrl-C while typer builds the command group
    # (before Commands.main reads the flags) says that command's words, not pack's (S34-8)
    from packtool.cli.failure import reset
    names = {c.name or typer.main.get_command_name(c.callback.__name__) for c in app.registered_commands}
    reset(next((a for a in sys.argv[1:] if a in names), None))
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

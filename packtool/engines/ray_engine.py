"""`pack_ray`: the `pack` pipeline on a Ray cluster, same inputs/config/result as `pack`.

What runs where:
  driver   resolve inputs, detect shapes, fingerprint (packtool.tokenize.pipeline), plan (global
           `packtool.planning.core.plan` over every row's length, or sharded: per-bin arrays only,
           see ray_plan), write the manifest last and swap the output into place.
  cluster  count JSON rows, then read + tokenize + write cache parts in one fused task per
           input piece (Datasource + map_batches), with sharded planning pack each row shard
           (placements stay in the object store), route segment tokens to shards and write
           slab shards (a cache Datasource, map_batches, groupby(shard).map_groups).
           Shard-write tasks are retried by Ray (max_retries).
A local output directory and cache root must be visible to every node (a shared file
system); a run that dies before the manifest leaves at most the temporary directory beside
the output, which has no manifest and so never verifies. On object storage (inputs, the
cache and the output as URIs) no node reads another's disk: see ray_store and
docs/SCALING.md.
"""
from __future__ import annotations

import logging
import re
import signal
import sys
import threading
import os
import time
from contextlib import contextmanager
from dataclasses import replace

from packtool.align import Alignment
from packtool.engines.ray_env import job_options, started
from packtool.engines.ray_source import TokenizeJob
from packtool.errors import PacktoolConfigError, PacktoolError, PacktoolInputError, cli_flag
from packtool.output.folder import Terminated
from packtool.packing import PackResult, _config_files, as_given, cache_root, claim, rows_named, write_output
from packtool.planning.core import PackingConfig, first_too_long
from packtool.planning.core import plan as make_plan
from packtool.planning.spill import PLAN_SHARD_ROWS
from packtool.planning.summary import plan_summary, with_cache
from packtool.workers import cores
from packtool.output.folder import check_cache_dir
from packtool.params import arguments
from packtool.notes import from_ray_workers, listen_to_ray_workers
from packtool.tokenize.cache import TokenizedCache
from packtool.tokenize.chat_keys import say_stored
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.long_rows import RowTooLongError
from packtool.storage import is_uri, locate
from packtool.tokenize.request import resolve_cache


@contextmanager
def _own_sigterm():
    """ray.init installs two SIGTERM handlers on the driver: a Python one that exits with
    status 15 and no word, and its core worker's native one that prints stack dumps and
    aborts (exit 134). packtool's own (output.claim_output: temporary files removed, one
    line, exit 143), or the default, is put back once Ray is up."""
    main = threading.current_thread() is threading.main_thread()
    prev = signal.getsignal(signal.SIGTERM) if main else None
    # The native one is installed when the core worker starts and catches SIGTERM in every
    # phase after; Ray reads this variable once, when ray_constants is imported (a caller
    # that set it keeps its value; one that imported Ray first gets the constant set).
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and os.environ["RAY_DISABLE_FAILURE_SIGNAL_HANDLER"] == "1":
        constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    try:
        yield
    except SystemExit as e:  # Ray's handler, while ray.init ran: packtool's own ending instead
        if e.code != signal.SIGTERM or type(e) is not SystemExit:
            raise
        if getattr(prev, "packtool_unwinds", False):  # the console script's: its own unwinding
            prev(signal.SIGTERM, None)
        raise Terminated() from None
    finally:
        if main and prev is not None:
            signal.signal(signal.SIGTERM, prev)


@contextmanager
def _daemons_apart():
    """A local Ray's processes (GCS, raylet and the workers it forks) started each in a process
    group of its own, so that a signal sent to the driver's whole group (Slurm, Kubernetes,
    `timeout`, a terminal) reaches the driver alone, as Ray already keeps SIGINT from them: the
    group's SIGTERM killed them under the driver, whose next Ray call then waited 60 s for the
    GCS and ended with status 1 and no packtool line. The driver unwinds and stops them
    (ray.shutdown); if it dies, the kernel ends them (Ray's fate sharing, PR_SET_PDEATHSIG),
    which is also what Ray requires before it parts groups on Windows."""
    import ray._private.services as services
    import ray._private.utils as utils
    popen = getattr(services, "ConsolePopen", None)
    if popen is None or not sys.platform.startswith("linux") or not utils.detect_fate_sharing_support():
        yield
        return

    class Apart(popen):
        def __init__(self, *a, **k):
            then = k.get("preexec_fn")

            def first():
                os.setpgid(0, 0)
                if then is not None:
                    then()
            k["preexec_fn"] = first
            super().__init__(*a, **k)

    services.ConsolePopen = Apart
    try:
        yield
    finally:
        services.ConsolePopen = popen


# What Ray's Python side logs while ray.init starts or joins a cluster for packtool (S38-8, and
# stop 38's "Left" 2): on stderr through Python's last-resort handler, under -q and --json too,
# where stderr holds packtool's lines only. Its advisory about its own default (token
# authentication, "Set RAY_AUTH_MODE=disabled to opt out") concerns a node only this run uses:
# dropped (the setting stays Ray's; docs/SCALING.md says it). What a user can act on is said as a
# packtool note in packtool's words (an object store off /dev/shm); any other warning as a note
# too, quoting Ray: nothing of Ray's reaches stderr but through packtool, and --json keeps it.
AUTH_ADVISORY = "Token authentication is enabled for this Ray cluster"
_SHM = re.compile(r"object store is using (\S+) instead of /dev/shm because /dev/shm has only (\d+) bytes")


def _in_packtools_words(text: str) -> str | None:
    """A Ray start-up warning as packtool says it (None: not said)."""
    if text.startswith(AUTH_ADVISORY):
        return None
    if m := _SHM.search(text):
        return (f"Ray's object store is in {m.group(1)}, not /dev/shm (only {int(m.group(2)) >> 20} MiB free there): "
                f"moving data between Ray tasks is slower; free space in /dev/shm or enlarge it (in Docker, "
                f"docker run --shm-size)")
    return f"Ray said while starting: {' '.join(text.split())}"


class _StartSaid(logging.Handler):
    """Python's last-resort handler while ray.init runs: Ray's records held, any other passed on."""

    def __init__(self, other: logging.Handler | None):
        super().__init__(logging.WARNING)
        self.other, self.said = other, []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name != "ray" and not record.name.startswith("ray."):
            if self.other is not None:
                self.other.handle(record)
            return
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: its format, as Ray wrote it
            text = str(record.msg)
        if (said := _in_packtools_words(text)) is not None:
            self.said.append(said)


@contextmanager
def _rays_start_said():
    """While ray.init runs, Ray's warnings are held and said after as packtool's notes. With
    configure_logging=False ray.init empties its `ray` logger's handlers (which does not
    propagate): its records then reach stderr through Python's last-resort handler, which is this
    one meanwhile. Ray's loggers are left as ray.init leaves them."""
    from packtool.notes import note
    held = _StartSaid(logging.lastResort)
    logging.lastResort = held
    try:
        yield
    finally:
        logging.lastResort = held.other
        for said in dict.fromkeys(held.said):  # each once
            note(said)


def init_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to `address`, or start a local Ray on this machine's cores. PACKTOOL_* variables
    of the driver are passed to the workers (cache locations)."""
    try:
        with _own_sigterm():  # before Ray reads its constants
            import ray
            import ray.data
    except ImportError:
        raise PacktoolInputError("the Ray engine needs Ray Data: pip install 'packtool[ray]'",
                                 flag=cli_flag("engine")) from None

    if not ray.is_initialized():
        # packtool shows its own bars (`progress`); Ray's bars and worker logs stay off:
        # a task's error still reaches the driver as the exception it raised
        kw = dict(log_to_driver=False, include_dashboard=False, configure_logging=False)
        # Ray's own variable (`ray job submit` sets it for the driver): ray.init joins its cluster
        # when given no address, so it is joined as --ray-address is (asked first, bounded); it
        # refused the local start's num_cpus there, said as "the local Ray node did not start"
        from packtool.engines.ray_join import check_answers, chosen, ray_reads
        address, from_env = chosen(address)
        kw["runtime_env"] = job_options(address)
        try:
            with ray_reads(address):
                if address:  # within a stated time, Ctrl-C landing (ray.init waits ~13 min, deaf)
                    check_answers(address)
                with _own_sigterm(), _rays_start_said():
                    if address:
                        ray.init(address=address, **kw)
                    else:  # "local": no address Ray finds itself (a `ray start` cluster here)
                        with _daemons_apart():
                            ray.init(address="local", num_cpus=num_cpus or cores(), **kw)
            started(local=not address)
        except Exception as e:  # (Ctrl-C and SIGTERM are BaseExceptions: they unwind as they are)
            raise not_started(e, address, from_env) from None
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    # The shard shuffle is a few large groups: the pull-based sort shuffle runs as plain
    # tasks, where the hash shuffle starts aggregator actors that a small cluster pays for.
    ctx.shuffle_strategy = ray.data.context.ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    # A task's packtool error (a bad row) comes back as itself, not as Ray Data's
    # UserCodeException, which loses it (an exception's __cause__ is not pickled)
    ctx.raise_original_map_exception = True
    # its notices (bars off, ...) and its log of a task's error are not the user's concern:
    # the error reaches the driver as the exception the task raised, said in one line
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)


def _logs() -> str:
    try:
        from ray._common.utils import get_default_ray_temp_dir
        return os.path.join(get_default_ray_temp_dir(), "session_latest", "logs")
    except Exception:  # another Ray's layout: its default place
        return "/tmp/ray/session_latest/logs"


def not_started(e: BaseException, address: str | None, from_env: bool = False) -> PacktoolConfigError:
    """Ray not coming up (a local node that cannot start under a file-size or memory limit, a
    cluster address that does not answer or runs another Ray) is the run's setting, not a
    packtool bug: one line naming the flag, Ray's reason and what to do instead."""
    why = " ".join(f"{type(e).__name__}: {e}".split())
    why = why if len(why) <= 240 else why[:240].rsplit(" ", 1)[0] + " …"  # Ray's texts run to paragraphs
    cli = cli_flag("engine") is not None  # the command line: its flags, else pack_ray's arguments
    ra = "--ray-address" if cli else "ray_address"
    if address and from_env:
        return PacktoolConfigError(
            f"environment variable RAY_ADDRESS={address}: could not join that Ray cluster ({why}); check "
            f"that `ray status --address {address}` answers from here and runs this Ray ({_ray_version()}), "
            f"or unset RAY_ADDRESS for a local Ray")
    if address:
        return PacktoolConfigError(
            f"{ra} {address}: could not join that Ray cluster ({why}); check that "
            f"`ray status --address {address}` answers from here and runs this Ray ({_ray_version()}), "
            f"or leave {ra} out for a local Ray", flag=ra if cli else None)
    engine, local = ("--engine ray", "--engine local") if cli else ("pack_ray", "packtool.pack")
    return PacktoolConfigError(
        f"{engine}: the local Ray node did not start ({why}); its logs are under {_logs()}; "
        f"use {local}, or start Ray with `ray start --head` and pass {ra} ADDRESS",
        flag="--engine" if cli else None)


def _ray_version() -> str:
    import ray
    return f"Ray {ray.__version__}"


_RAY_RETRY_NOTE = re.compile(r"\s+Failed to .*? after \d+/\d+ attempts \(total backoff .*\Z", re.S)


def _unwrap(e: BaseException) -> BaseException:
    """The packtool error (bad input row, impossible plan, a row too long for memory) a Ray
    task raised, if any (Ray wraps task errors, and changes their text)."""
    seen, todo = set(), [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        # (a row refused for memory is a MemoryError that names its file and row: packtool's too)
        if isinstance(x, (PacktoolError, RowTooLongError)) and not type(x).__module__.startswith("ray"):
            # (not Ray's RayTaskError(PlanError) dual class: its text is a traceback.) Ray Data
            # appends its retry advice to a task's exception ("Failed to apply UDF transform
            # after 1/1 attempts ..."), which is not packtool's advice
            if x.args and isinstance(x.args[0], str):
                x.args = (_RAY_RETRY_NOTE.sub("", x.args[0]), *x.args[1:])
            return x
        todo += [getattr(x, "cause", None), x.__cause__, x.__context__]
    return e


def tokenized_cache(inputs: list[str], cfg: TokenizeConfig, cache_dir: str | None,
                    progress: bool = False, check_lengths=None) -> TokenizedCache:
    """The cache `tokenize_to_cache` would return (same fingerprint), built on Ray if absent.
    `check_lengths`: as tokenize_to_cache's (pack's `--overflow error` refusal), run by the
    tokenize tasks on each batch."""
    from packtool.engines.ray_cache import InputHashes, build_cache

    if is_uri(cache_dir):  # an entry on the store, built and read by the tasks (ray_store)
        from packtool.engines.ray_store import store_tokenized_cache
        return store_tokenized_cache(inputs, cfg, cache_dir, progress, check_lengths)
    hashes = InputHashes()  # the inputs are read by tasks, never by the driver
    r = resolve_cache(inputs, cfg, cache_dir, digest=hashes)
    if r.existing is not None:
        say_stored(r.existing.meta, r.template)  # its notes, as when it was built
        return r.existing
    if cfg.side_columns or cfg.support_columns:
        # side columns come only with pre-tokenized rows, whose ingest is a columnar copy into
        # flat/ (no tokenizer): the driver builds that cache, the cluster plans and writes
        from packtool.tokenize.pipeline import tokenize_to_cache
        return tokenize_to_cache(inputs, cfg, cache_dir, progress, check_lengths)
    job = TokenizeJob(tuple(r.files), tuple(r.shapes), r.cfg, r.info, r.template, check_lengths)
    return build_cache(job, r.fingerprint, r.final, r.root, progress, hashes.sha256, hashed=hashes.read)


def pack_ray(inputs: list[str], alignment: Alignment | None = None, packing: PackingConfig | None = None,
             tokenize: TokenizeConfig | None = None, output: str | None = None,
             overwrite: bool = False, dry_run: bool = False, cache_dir: str | None = None,
             progress: bool = False, shard_tokens: int = 64 << 20,
             ray_address: str | None = None, num_cpus: int | None = None,
             plan_shard_rows: int | None = None) -> PackResult:
    """`packtool.packing.pack` with Ray Data doing the reading, tokenizing and slab writing.
    `plan_shard_rows`: plan in shards of this many rows as Ray tasks, then merge the underfull
    bins; the driver then holds per-bin arrays only, and `PackResult.plan` is a
    `plan_sharded.ShardedPlan` (its `stats` give the extra bins). None: the local engine's
    default (`plan_spill.PLAN_SHARD_ROWS`), so both engines plan, and write, the same bytes;
    0 plans globally on the driver."""
    output, overwrite, dry_run, cache_dir, progress, shard_tokens, ray_address, num_cpus, plan_shard_rows = arguments(
        output=output, overwrite=overwrite, dry_run=dry_run, cache_dir=cache_dir, progress=progress,
        shard_tokens=shard_tokens, ray_address=ray_address, num_cpus=num_cpus, plan_shard_rows=plan_shard_rows)
    alignment, packing, tokenize = alignment or Alignment(), packing or PackingConfig(), tokenize or TokenizeConfig()
    from packtool.planning.bounds import check_capacity, check_processes
    check_capacity(alignment, sharded=plan_shard_rows != 0)  # the driver's tables; writers are tasks
    if num_cpus:  # the local node starts up to one worker process per CPU it is given
        check_processes(num_cpus, "num_cpus", num_cpus, "Ray worker processes")
    items = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    cache_dir = check_cache_dir(cache_dir, items)  # a store's too: its mirror's local root
    if is_uri(cache_dir):  # a URI packtool refuses (scheme, user:password@) is said before Ray starts
        locate(cache_dir)
    with claim(output, overwrite, dry_run, inputs=[*items, *_config_files(tokenize)],
               cache_dir=cache_root(cache_dir), cache_uri=cache_dir if is_uri(cache_dir) else None) as out:
        # what the tasks noted is said here, before the result or the error (not after Ctrl-C
        # or SIGTERM: the signal may have reached a local Ray's GCS, which holds them)
        try:
            res = _pack_ray(inputs, alignment, packing, tokenize, out, dry_run, cache_dir,
                            progress, shard_tokens, ray_address, num_cpus, plan_shard_rows)
        except Exception:
            from_ray_workers()
            raise
        from_ray_workers()
        return as_given(res, output)


def _pack_ray(inputs, alignment, packing, tokenize, output, dry_run, cache_dir, progress,
              shard_tokens, ray_address, num_cpus, plan_shard_rows) -> PackResult:
    init_ray(ray_address, num_cpus)
    listen_to_ray_workers()  # pack_ray says them as it ends
    t0 = time.perf_counter()
    try:
        # pieces are tokenized in parallel: the row named is the first found, not the first in read order
        early = first_too_long(alignment, packing, stopped="tokenizing stopped there")
        cache = tokenized_cache(list(inputs), tokenize, cache_dir, progress, early)  # named as this run's
    except Exception as e:
        raise _unwrap(e) from None
    t_tok = time.perf_counter() - t0
    if plan_shard_rows is None:
        plan_shard_rows = PLAN_SHARD_ROWS
    if plan_shard_rows:  # the driver holds per-bin arrays only (packtool.planning.sharded)
        from packtool.engines.ray_plan import plan_on_ray
        with rows_named(cache):  # "sequence N" named as its input file and row, as locally
            try:
                p = plan_on_ray(cache, alignment, packing, plan_shard_rows)
            except Exception as e:
                raise _unwrap(e) from None
        summary = p.summary()
        logging.getLogger(__name__).info("sharded plan: %s", p.stats.to_dict())
    else:
        with rows_named(cache):
            p = make_plan(cache.lengths(), alignment, packing)
        summary = plan_summary(p)
    summary = with_cache(summary, cache)
    if dry_run:
        return PackResult(None, p, summary, [], 0, cache.path, t_tok, 0.0)
    from packtool.engines.ray_write import write_slabs

    t1 = time.perf_counter()
    # to a store, the write tasks upload the shards themselves (write_output's `uploads`)
    try:  # a write task's packtool error (its run's lease lost, on a store) as itself, not Ray's
        shards, loss = write_output(p, summary, cache, output,
                                    lambda tmp, pad_id: write_slabs(p, cache, tmp, pad_id, shard_tokens,
                                                                    progress=progress),
                                    uploads=True)
    except Exception as e:
        raise _unwrap(e) from None
    if plan_shard_rows:  # the placements are written: let the object store free them
        p = replace(p, handles=[])
    return PackResult(output, p, summary, shards, loss, cache.path, t_tok, time.perf_counter() - t1)

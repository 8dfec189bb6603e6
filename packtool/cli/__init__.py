"""The `packtool` command: `app` parses flags and calls the library, `printing` prints.

`main` is the console script's entry: it loads the command line itself, so that a Ctrl-C
while the CLI's modules load (rich, typer, a second or so on a cold disk) ends in the same
one line as a Ctrl-C anywhere else, not in a KeyboardInterrupt traceback. Every run leaves
without the interpreter's teardown (`_leave`): its daemon threads may be in native code.

SIGTERM (what batch schedulers and Kubernetes send) takes the same path from the first line
on: its handler raises `Terminated`, a KeyboardInterrupt, so every place that unwinds a
Ctrl-C (temporary files, created --cache-dir folders, worker pools, the committed result)
unwinds it too; only the words and the status (143) differ."""
import os
import signal
import sys

EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, as SIGINT raises KeyboardInterrupt."""


_TERMINATED: list[int] = []  # kept here too: typer turns a KeyboardInterrupt into a bare exit 130


def _on_sigterm(signum, frame):
    _TERMINATED.append(signum)
    raise Terminated()


_on_sigterm.packtool_unwinds = True  # the library's own SIGTERM handler keeps this one


def stopped(e: BaseException | None) -> tuple[str, int]:
    """How the run was stopped, as the error line says it, and the status: Ctrl-C or SIGTERM."""
    if isinstance(e, Terminated) or _TERMINATED:
        return "terminated (SIGTERM)", EXIT_TERMINATED
    return "interrupted (Ctrl-C)", 130


def main() -> None:
    json_out = "--json" in sys.argv[1:]
    from packtool.threads import HeldStderr
    blas = HeldStderr()
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
        _let_held_signals_land()
        _check_home(json_out)  # before the modules load: numba's kernel cache is placed as they do
        with blas:  # numpy's OpenBLAS starts its pool as it loads, and prints its own lines if refused
            from packtool.cli.app import main as run
        blas.said()
        from packtool.cli.failure import interrupted, keep_committed
        keep_committed()  # this process ends with the command: a printed result stays the outcome
    except KeyboardInterrupt as e:
        from packtool.cli.memory import blas_refused, blas_threads_refused
        if not isinstance(e, Terminated) and blas_refused(e):  # numpy's OpenBLAS, not the user: its
            # own four lines are this refusal, said in packtool's one line
            kind, msg, code, fix = "resources", blas_threads_refused(), 2, ""
        else:
            blas.said()
            how, code = stopped(e)
            kind, msg, fix = "interrupted", f"{how} while packtool was starting; nothing was read or written", \
                ": re-run the command to start again"
        sys.stderr.write(f"error: {msg}{fix}\n")
        if json_out:
            try:  # stdout may be full or closed (cli.stdout's cases): the line above said it all
                sys.stdout.write('{"error": {"kind": "%s", "type": "%s", "message": %s, "path": null, "row": null, '
                                 '"flag": null, "exit_code": %d}}\n' % (kind, type(e).__name__, _json_text(msg), code))
            except (OSError, AttributeError):
                pass
        _leave(code)  # sys.exit's teardown ended some such runs by SIGINT (exit -2) after the line
    try:
        run()
    except KeyboardInterrupt as e:  # between typer's set-up and the command's own handling
        _leave(interrupted(json_out, e))
    except SystemExit as e:  # every end, not only a stopped one: see _leave
        _leave(_status(e.code))


def _json_text(text: str) -> str:
    import json
    return json.dumps(text)


def _check_home(json_out: bool) -> None:
    """No home (HOME unset, no password entry) where the kernels need one: the one line, exit 2."""
    from packtool.env import check_home
    from packtool.errors import PacktoolError
    try:
        check_home()
    except PacktoolError as e:
        from packtool.cli.failure import report
        _leave(report(e, json_out))


def _status(code) -> int:
    """sys.exit's argument as the process status it stands for (None 0; a message 1, said)."""
    if code is None or isinstance(code, int):
        return code or 0
    sys.stderr.write(f"{code}\n")
    return 1


def _let_held_signals_land() -> None:
    """Ctrl-C and SIGTERM that came while the command started (packtool/__init__.py holds them
    from its first lines) land here, inside main's handling: the one line, not a traceback."""
    import packtool
    held, packtool._HELD = packtool._HELD, None
    if held:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def _leave(code: int) -> None:
    """End the run now, whatever its status: the worker pools (`packtool.workers`: multiprocessing's atexit
    handler would join a pool's idle workers forever), atexit's handlers (temporary folders,
    Ray) and the streams' buffers, then the process, skipping Py_Finalize. Its last full garbage collection walks
    every object the interrupted work left (tokenizer, batches, numba, Arrow) while the
    tokenizer's native threads finish the encode_batch call in flight on every core: measured
    1-21 s (median ~6) of silence after the error line on this 2-core machine, at load 14-20.
    The temporary files are gone already; nothing is left to finalize. Every run ends so, not
    only a stopped one: an error found in the first second (a CSV that does not parse) ended
    while the packtool-warm thread compiled in LLVM with the GIL released; Py_Finalize made that
    thread exit as it came back, the forced unwind met a C++ frame, and std::terminate aborted
    the process (exit 134 after the error line, 1 run in 3: stranger30 S30-4)."""
    import atexit
    if "packtool.workers" in sys.modules:  # else no pool was started
        sys.modules["packtool.workers"].stop_all()
    atexit._run_exitfuncs()
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except (OSError, ValueError, AttributeError):  # a full, closed or gone stdout (None: `>&-`): said already
            pass
    os._exit(code)


def __getattr__(name: str):
    if name == "app":  # `from packtool.cli import app`, loaded on first use
        from packtool.cli.app import app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]

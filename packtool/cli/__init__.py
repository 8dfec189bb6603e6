"""The `packtool` command: `app` parses flags and calls the library, `printing` prints.

`main` is the console script's entry: it loads the command line itself, so that a Ctrl-C
while the CLI's modules load (rich, typer, a second or so on a cold disk) ends in the same
one line as a Ctrl-C anywhere else, not in a KeyboardInterrupt traceback. A run that Ctrl-C
ended leaves without the interpreter's teardown (`_leave`)."""
import os
import sys


def main() -> None:
    json_out = "--json" in sys.argv[1:]
    try:
        from packtool.cli.app import main as run
        from packtool.cli.failure import interrupted, keep_committed
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted (Ctrl-C) while packtool was starting; nothing was "
                         "read or written: re-run the command to start again\n")
        if json_out:
            sys.stdout.write('{"error": {"kind": "interrupted", "type": "KeyboardInterrupt", "message": '
                             '"interrupted (Ctrl-C) while packtool was starting; nothing was read or written", '
                             '"path": null, "row": null, "flag": null, "exit_code": 130}}\n')
        _leave(130)  # sys.exit's teardown ended some such runs by SIGINT (exit -2) after the line
    keep_committed()  # this process ends with the command: a printed result stays the outcome
    try:
        run()
    except KeyboardInterrupt:  # between typer's set-up and the command's own handling
        _leave(interrupted(json_out))
    except SystemExit as e:
        if e.code != 130:  # failure.EXIT_INTERRUPTED: the command said so already
            raise
        _leave(130)


def _leave(code: int) -> None:
    """End a Ctrl-C'd run now: the worker pools (`packtool.workers`: multiprocessing's atexit
    handler would join a pool's idle workers forever), atexit's handlers (temporary folders,
    Ray) and the streams' buffers, then the process, skipping Py_Finalize. Its last full garbage collection walks
    every object the interrupted work left (tokenizer, batches, numba, Arrow) while the
    tokenizer's native threads finish the encode_batch call in flight on every core: measured
    1-21 s (median ~6) of silence after the error line on this 2-core machine, at load 14-20.
    The temporary files are gone already; nothing is left to finalize."""
    import atexit
    if "packtool.workers" in sys.modules:  # else no pool was started
        sys.modules["packtool.workers"].stop_all()
    atexit._run_exitfuncs()
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except (OSError, ValueError):  # a closed or gone reader: nothing more to say
            pass
    os._exit(code)


def __getattr__(name: str):
    if name == "app":  # `from packtool.cli import app`, loaded on first use
        from packtool.cli.app import app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]

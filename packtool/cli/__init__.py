"""The `packtool` command: `app` parses flags and calls the library, `printing` prints.

`main` is the console script's entry: it loads the command line itself, so that a Ctrl-C
while the CLI's modules load (rich, typer, a second or so on a cold disk) ends in the same
one line as a Ctrl-C anywhere else, not in a KeyboardInterrupt traceback."""
import sys


def main() -> None:
    json_out = "--json" in sys.argv[1:]
    try:
        from packtool.cli.app import main as run
        from packtool.cli.failure import interrupted
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted (Ctrl-C) while packtool was starting; nothing was "
                         "read or written: re-run the command to start again\n")
        if json_out:
            sys.stdout.write('{"error": {"kind": "interrupted", "type": "KeyboardInterrupt", "message": '
                             '"interrupted (Ctrl-C) while packtool was starting; nothing was read or written", '
                             '"path": null, "row": null, "flag": null, "exit_code": 130}}\n')
        sys.exit(130)
    try:
        run()
    except KeyboardInterrupt:  # between typer's set-up and the command's own handling
        sys.exit(interrupted(json_out))


def __getattr__(name: str):
    if name == "app":  # `from packtool.cli import app`, loaded on first use
        from packtool.cli.app import app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]

"""The `packtool` command: `app` parses flags and calls the library, `printing` prints."""
from packtool.cli.app import app, main

__all__ = ["app", "main"]

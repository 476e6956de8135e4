"""The ``commlens`` command: argument parsing and printing only."""

from commlens.cli.app import app, main

__all__ = ["app", "main"]

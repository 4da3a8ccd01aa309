"""argparse for kfuse's commands, with kfuse's convention for bad command lines: one line on
stderr naming the problem and exit status 2, never argparse's usage dump or a traceback."""

from __future__ import annotations

import argparse
from typing import NoReturn


class UsageError(Exception):
    """A bad command line; its message is printed as one line."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise UsageError (the caller prints and exits 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

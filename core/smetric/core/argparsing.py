"""The commands' argument parsers: a usage error is one line that points at ``--help`` (argparse's
own error prints the whole usage first, dozens of lines for ``smetric bench`` or ``smetric-epp``)."""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineErrors(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are ``PROG: error: MESSAGE (see PROG --help)``,
    exit status 2; its sub-command parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

"""Options several commands share."""

from __future__ import annotations

from typing import Any

import typer

THREADS_HELP = ("Torch CPU threads. Default: 1 for a model under 10M parameters, else the cores the load average "
                "leaves free (docs/threads.md).")


def threads_option() -> Any:
    return typer.Option(None, "--threads", min=1, help=THREADS_HELP)

"""Options several commands share."""

from __future__ import annotations

from typing import Any

import typer

THREADS_HELP = ("Torch CPU threads. Default: chosen from the model's size (one thread below 100M parameters, "
                "where more lose on a busy machine; see docs/threads.md).")


def threads_option() -> Any:
    return typer.Option(None, "--threads", min=1, help=THREADS_HELP)

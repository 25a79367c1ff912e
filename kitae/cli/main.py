"""The `kitae` command. Each group of commands lives in its own module with a `register(app)` function."""

from __future__ import annotations

import importlib
import os
import sys
import warnings

import typer

from kitae.errors import KitaeError

app = typer.Typer(
    name="kitae",
    help="kitae (鍛え): reinforcement fine-tuning of language models with GRPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules that add commands; each defines `register(app: typer.Typer) -> None`.
COMMAND_MODULES = [
    "kitae.cli.inference",  # chat, generate
    "kitae.cli.grade",  # grade, grader validate
    "kitae.cli.train",  # train
    "kitae.cli.plan",  # plan (memory before a run)
    "kitae.cli.runs",  # runs list/show
    "kitae.cli.serve",  # serve rm, serve model
    "kitae.cli.ui",  # ui (the run page)
    "kitae.cli.curate",  # curate
    "kitae.cli.evaluate",  # eval (models side by side: pass@1, length, token efficiency)
    "kitae.cli.long2short",  # merge, long2short (also as l2s; Kimi k1.5)
]


def _register_all() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register_all()


def _version(value: bool) -> None:
    if value:
        from kitae import __version__

        typer.echo(f"kitae {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """kitae (鍛え): reinforcement fine-tuning of language models with GRPO."""


def _quiet_libraries() -> None:
    """Hide transformers' and datasets' progress bars and advice (kitae prints its own progress) and the
    deprecation warnings a dependency raises about its own internals (TRL's configs still pass transformers'
    `gradient_checkpointing`, its trainers call `gradient_checkpointing_enable` and friends): a person running
    kitae can do nothing about them.

    Set through the environment (read when a library is first imported), so a command that never loads a model
    does not pay for importing transformers (seconds) just to silence it."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore", message=r".*`\w*gradient_checkpointing\w*` is deprecated", category=FutureWarning)


def command():
    """The click command `kitae` runs: the typer app with readable option metavars (TEXT, PATH, no ``<bool>``)."""
    from kitae.cli.options import readable_metavars

    return readable_metavars(typer.main.get_command(app))


def main() -> None:
    _quiet_libraries()
    try:
        command()(prog_name="kitae")
    except KitaeError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()

"""Options, and small helpers, several commands share (`kitae eval`, `kitae long2short ...`)."""

from __future__ import annotations

from typing import Any, Optional

import typer

DATA_HELP = "Prompt set: a .jsonl/.parquet file, a datasets folder, or bundled:arith/test."
GRADER_HELP = "Grader spec: a type name ('answer'), inline YAML/JSON, or a spec file."
# typer's type labels (<str>, <list[str]>, <bool>) as click's metavars: what a person types after the option
METAVARS = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "path": "PATH", "file": "FILE",
            "directory": "FOLDER", "datetime": "DATETIME"}
THREADS_HELP = ("Torch CPU threads. Default: 1 for a model under 10M parameters, else the cores the load average "
                "leaves free (docs/threads.md).")


def threads_option() -> Any:
    return typer.Option(None, "--threads", min=1, help=THREADS_HELP)


def template_kwargs_option(help: str) -> Any:
    """--chat-template-kwargs JSON: the chat template's variables (`kitae serve`, `kitae chat`), read with
    :func:`template_kwargs_of`."""
    return typer.Option(None, "--chat-template-kwargs", metavar="JSON", show_default=False, help=help)


def template_kwargs_of(text: str | None) -> dict | None:
    """--chat-template-kwargs read as `kitae serve` reads a request's (a JSON object of template variables)."""
    import json

    from kitae.http.requests import RequestError
    from kitae.serving.server import template_kwargs

    if text is None:
        return None
    try:
        return template_kwargs(json.loads(text), "--chat-template-kwargs")
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON ({exc}); write it like '{{\"enable_thinking\": false}}'",
                                 param_hint="--chat-template-kwargs") from None
    except RequestError as exc:
        raise typer.BadParameter(str(exc), param_hint="--chat-template-kwargs") from None


def prompt_rows(data: str, limit: Optional[int]) -> list[dict]:
    """The rows of a prompt set (a file, a datasets folder or ``bundled:arith/test``), the first `limit` only."""
    from kitae.data.loader import load_prompts
    from kitae.trainer.config import resolve_data_path

    rows = load_prompts(resolve_data_path(data))
    return rows[:limit] if limit else rows


class PromptProgress:
    """A tqdm bar over prompts on stderr, fed with the number of prompts done so far."""

    def __init__(self, total: int, desc: str):
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="prompt", leave=False)

    def __call__(self, done: int) -> None:
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def sampling_params(temperature: float, max_new_tokens: int, seed: int) -> Any:
    """The SamplingParams of the --temperature, --max-new-tokens and --seed options."""
    from kitae.rollout.base import SamplingParams

    return SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)


def readable_metavars(command: Any) -> Any:
    """`command` (a click command or group, as typer builds it) with readable metavars on every option below it:
    nothing after a flag (typer shows ``<bool>``), ``TEXT``/``INTEGER``/``NUMBER``/``PATH`` for a value (``<str>``,
    ``<int range>``, ``<list[str]>``: a repeatable option says so in its help) and ``a|b|c`` for a choice. An
    option given its own metavar keeps it."""
    help_option = command.get_help_option(command.context_class(command))  # made once, then kept (typer's click)
    for param in [*getattr(command, "params", []), *([help_option] if help_option else [])]:
        if param.param_type_name == "option" and param.metavar is None and hasattr(param, "display_type"):
            param.metavar = "" if param.is_flag else _metavar(param.display_type(None))
    for sub in getattr(command, "commands", {}).values():
        readable_metavars(sub)
    return command


def _metavar(label: str) -> str:
    """``<list[str]>`` -> ``TEXT``, ``<int range>`` -> ``INTEGER``, ``<float32|bfloat16>`` -> ``float32|bfloat16``."""
    label = label.strip("<>")
    if label.startswith("list[") and label.endswith("]"):
        label = label[5:-1]
    label = label.removesuffix(" range")
    return METAVARS.get(label.lower(), label if "|" in label else label.upper())

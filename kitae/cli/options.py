"""Options, and small helpers, several commands share (`kitae eval`, `kitae long2short ...`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import typer

from kitae.errors import ConfigError

DATA_HELP = "Prompt set: a .jsonl/.parquet file, a datasets folder, or bundled:arith/test."
GRADER_HELP = "Grader spec: a type name ('answer'), inline YAML/JSON, or a spec file."
# typer's type labels (<str>, <list[str]>, <bool>) as click's metavars: what a person types after the option
METAVARS = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "path": "PATH", "file": "FILE",
            "directory": "FOLDER", "datetime": "DATETIME"}
THREADS_HELP = ("Torch CPU threads. Default: 1 for a model under 10M parameters, else the cores the load average "
                "leaves free (docs/threads.md).")


def threads_option() -> Any:
    return typer.Option(None, "--threads", min=1, help=THREADS_HELP)


def prompt_rows(data: str, limit: Optional[int]) -> list[dict]:
    """The rows of a prompt set (a file, a datasets folder or ``bundled:arith/test``), the first `limit` only."""
    from kitae.trainer.config import load_data

    return load_data(data, "--data", limit=limit)[1]


# ---- a prompt set read as `kitae train` reads one (data.fields, answer_pattern, system, chat_template_kwargs) ----
CONFIG_HELP = ("A training config (e.g. runs/NAME/config.yaml): its data.fields, data.answer_pattern, data.system "
               "and model.chat_template_kwargs apply (the flags below go over them), its data.eval is the "
               "default --data, and with an environment section every sample is an episode with its tools "
               "(its turn_max_new_tokens and episode_max_tokens bound the episode, not --max-new-tokens).")
FIELD_HELP = ("KITAE_FIELD=COLUMN: read kitae's field from your dataset's column, as data.fields in a config "
              "(--field prompt=question --field reference_answer=answer; repeatable).")
ANSWER_PATTERN_HELP = ("A regex that cuts the reference answer out of a longer one (its first group), as "
                       "data.answer_pattern: '####\\s*(.+)$' for GSM8K.")
SYSTEM_HELP = "A system prompt put before every prompt without one, as data.system."
TEMPLATE_KWARGS_HELP = ("The chat template's variables, a JSON object (e.g. '{\"enable_thinking\": false}' for "
                        "Qwen3), as model.chat_template_kwargs.")


def config_option() -> Any:
    return typer.Option(None, "--config", "-c", help=CONFIG_HELP)


def field_option() -> Any:
    return typer.Option([], "--field", metavar="KITAE_FIELD=COLUMN", help=FIELD_HELP)


def answer_pattern_option() -> Any:
    return typer.Option(None, "--answer-pattern", metavar="REGEX", help=ANSWER_PATTERN_HELP)


def system_option() -> Any:
    return typer.Option(None, "--system", help=SYSTEM_HELP)


def template_kwargs_option(help: str = TEMPLATE_KWARGS_HELP) -> Any:
    """--chat-template-kwargs JSON: the chat template's variables (`kitae eval`, `kitae chat`, `kitae serve`), read
    with :func:`template_kwargs_of`."""
    return typer.Option(None, "--chat-template-kwargs", metavar="JSON", show_default=False, help=help)


def template_kwargs_of(text: str | None) -> dict | None:
    """--chat-template-kwargs read as a command line option (None: not given); bad JSON is a typer error naming it."""
    if text is None:
        return None
    try:
        return parse_template_kwargs(text)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc).removeprefix("--chat-template-kwargs: "),
                                 param_hint="--chat-template-kwargs") from None


@dataclass
class PromptSet:
    """A prompt set and how to read and prompt it, as `kitae train` does: the rows (mapped by data.fields,
    answer_pattern and system, kitae.trainer.config.load_data) and the chat template's variables."""

    rows: list[dict]
    chat_template_kwargs: dict[str, Any]
    environment: Any = None  # the --config's environment section: each sample an episode with its tools


def read_prompt_set(data: Optional[str], limit: Optional[int], config: Optional[Path] = None,
                    fields: Sequence[str] = (), answer_pattern: Optional[str] = None, system: Optional[str] = None,
                    template_kwargs: Optional[str] = None) -> PromptSet:
    """The prompt set of --data (default: the --config's data.eval, else bundled:arith/test) read with the
    --config's data options, model.chat_template_kwargs and environment section, each flag given over its
    setting. Bad values are ConfigErrors naming the flag or the config key."""
    from kitae.config import from_dict
    from kitae.trainer.config import DataConfig, load_data, load_train_config

    cfg = load_train_config(config) if config is not None else None
    base = cfg.data if cfg is not None else DataConfig()
    settings = {"fields": {**base.fields, **parse_fields(fields)},
                "answer_pattern": base.answer_pattern if answer_pattern is None else answer_pattern,
                "system": base.system if system is None else system}
    rowmap = from_dict(DataConfig, settings, "data").rowmap()
    if template_kwargs is not None:
        kwargs = parse_template_kwargs(template_kwargs)
    else:
        kwargs = dict(cfg.model.chat_template_kwargs) if cfg is not None else {}
    env = cfg.environment if cfg is not None else None
    if data is None and cfg is not None and cfg.data.eval:
        return PromptSet(load_data(cfg.data.eval, "data.eval", rowmap, limit)[1], kwargs, env)
    return PromptSet(load_data(data or "bundled:arith/test", "--data", rowmap, limit)[1], kwargs, env)


def parse_fields(items: Sequence[str]) -> dict[str, str]:
    """``["prompt=question"]`` -> ``{"prompt": "question"}`` (--field)."""
    out = {}
    for item in items:
        target, sep, column = item.partition("=")
        if not sep or not target.strip() or not column.strip():
            raise ConfigError("--field", f"{item!r}: write KITAE_FIELD=COLUMN, e.g. --field prompt=question")
        out[target.strip()] = column.strip()
    return out


def parse_template_kwargs(text: str) -> dict[str, Any]:
    """--chat-template-kwargs: a JSON object of the chat template's variables."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError("--chat-template-kwargs", f"not JSON ({exc}); write a JSON object, e.g. "
                          "'{\"enable_thinking\": false}'") from None
    if not isinstance(value, dict):
        raise ConfigError("--chat-template-kwargs", f"expected a JSON object of the template's variables, got "
                          f"{type(value).__name__}; e.g. '{{\"enable_thinking\": false}}'")
    from kitae.serving.server import TEMPLATE_ARGUMENTS

    for key in value:
        if key in TEMPLATE_ARGUMENTS:
            raise ConfigError(f"--chat-template-kwargs.{key}", "an argument of apply_chat_template, not a variable "
                              "of the chat template; remove it")
    return value


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

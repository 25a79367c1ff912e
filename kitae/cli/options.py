"""Options, and small helpers, several commands share (`kitae eval`, `kitae l2s ...`)."""

from __future__ import annotations

from typing import Any, Optional

import typer

DATA_HELP = "Prompt set: a .jsonl/.parquet file, a datasets folder, or bundled:arith/test."
GRADER_HELP = "Grader spec: a type name ('answer'), inline YAML/JSON, or a spec file."
THREADS_HELP = ("Torch CPU threads. Default: 1 for a model under 10M parameters, else the cores the load average "
                "leaves free (docs/threads.md).")


def threads_option() -> Any:
    return typer.Option(None, "--threads", min=1, help=THREADS_HELP)


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

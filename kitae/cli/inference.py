"""`kitae chat` and `kitae generate`: inference with the rollout engine."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kitae.chat import split_at_end, to_messages
from kitae.cli.options import threads_option


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)
    app.command("generate")(generate)


def chat(
    prompt: str = typer.Argument(..., help="The user message."),
    model: Optional[str] = typer.Option(None, "--model", "-m",
                                        help="Model folder, Hub id or LoRA adapter folder (a checkpoint's model/); default: the bundled tiny base model."),
    system: Optional[str] = typer.Option(None, "--system", help="A system message put before the user turn."),
    temperature: float = typer.Option(0.5, help="Sampling temperature (0 = greedy)."),
    top_p: float = typer.Option(0.95, help="Nucleus sampling mass."),
    repetition_penalty: float = typer.Option(1.05, help="HF-style repetition penalty."),
    max_new_tokens: int = typer.Option(1024, help="Stop after this many new tokens."),
    seed: int = typer.Option(0, help="Random seed: the same seed and settings give the same answer."),
    raw: bool = typer.Option(False, help="Print the raw completion with its end marker and finish reason."),
    threads: Optional[int] = threads_option(),
) -> None:
    """Answer one prompt the way the GRPO-zero recipe's inference code does: the model's chat template (ChatML
    when it has none), stop at its end of turn (<|im_end|>, <|eot_id|>, <end_of_turn>, ...)."""
    from kitae.models import resolve_model_path

    path = resolve_model_path(model, "--model", adapter=True)  # before torch: a wrong path fails at once
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.vision import load_engine
    from kitae.threads import set_threads

    set_threads(threads, path)
    engine = load_engine(path)
    sp = SamplingParams(temperature, top_p, 0, repetition_penalty, max_new_tokens, seed=seed)
    [[c]] = engine.generate([to_messages(prompt, system)], 1, sp)
    if raw:
        typer.echo(c.text)
        typer.echo(f"[finish_reason={c.finish_reason} tokens={c.num_tokens}]", err=True)
    else:
        typer.echo(split_at_end(c.text, c.end_marker)[0])


def generate(
    data: Path = typer.Option(..., "--data", "-d", help="Prompt set (.jsonl, .parquet or a datasets folder)."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write one JSON row per prompt with its samples."),
    model: Optional[str] = typer.Option(None, "--model", "-m",
                                        help="Model folder, Hub id or LoRA adapter folder; default: the bundled model."),
    n: int = typer.Option(4, "-n", help="Completions per prompt."),
    temperature: float = typer.Option(1.0, help="Sampling temperature (0 = greedy)."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling mass."),
    top_k: int = typer.Option(0, help="Top-k filter (0 = off)."),
    repetition_penalty: float = typer.Option(1.0, help="HF-style repetition penalty."),
    max_new_tokens: int = typer.Option(128, help="Maximum new tokens per completion."),
    batch_prompts: int = typer.Option(16, help="Prompts per generation batch."),
    seed: int = typer.Option(0, help="Random seed."),
    limit: Optional[int] = typer.Option(None, help="Only the first N prompts."),
    threads: Optional[int] = threads_option(),
) -> None:
    """Sample K completions per prompt. Output rows are {"item": row, "samples": [...]}, ready for `kitae grade`."""
    from kitae.models import resolve_model_path

    model_path = resolve_model_path(model, "--model", adapter=True)  # before torch: a wrong path fails at once
    from tqdm import tqdm

    from kitae.data.loader import load_prompts, write_jsonl
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.vision import load_engine
    from kitae.threads import set_threads

    rows = load_prompts(data)[:limit]
    set_threads(threads, model_path)
    engine = load_engine(model_path)
    out_rows = []
    sampling = SamplingParams(temperature, top_p, top_k, repetition_penalty, max_new_tokens, seed=seed)
    with tqdm(total=len(rows), desc="generate", unit="prompt") as bar:
        for start in range(0, len(rows), batch_prompts):
            batch = rows[start : start + batch_prompts]
            groups = engine.generate([r["messages"] for r in batch], n, sampling.offset_seed(start))
            for row, group in zip(batch, groups):
                samples = [completion_record(c) for c in group]
                out_rows.append({"item": row, "samples": samples})
            bar.update(len(batch))
    write_jsonl(out, out_rows)
    typer.echo(f"wrote {len(out_rows)} prompts x {n} samples to {out}")


def completion_record(c) -> dict:
    return {"output_text": c.text, "finish_reason": c.finish_reason, "completion_tokens": c.num_tokens}

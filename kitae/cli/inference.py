"""`kitae chat` and `kitae generate`: inference with the rollout engine."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kitae.chat import THINK_OPEN, split_at_end, to_messages
from kitae.cli.options import template_kwargs_of, template_kwargs_option, threads_option


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
    raw: bool = typer.Option(False, help="Print the raw completion with its end marker, and on stderr the prompt "
                                         "as the model saw it (the chat template applied) and the finish reason."),
    chat_template_kwargs: Optional[str] = template_kwargs_option(
        "The chat template's variables, a JSON object, as model.chat_template_kwargs in a training config (e.g. "
        "'{\"enable_thinking\": false}' turns Qwen3's thinking off)."),
    threads: Optional[int] = threads_option(),
) -> None:
    """Answer one prompt the way the GRPO-zero recipe's inference code does: the model's chat template (ChatML
    when it has none), stop at its end of turn (<|im_end|>, <|eot_id|>, <end_of_turn>, ...).

    A reasoning model's <think>...</think> block is printed with the answer; where the chat template opens it in
    the prompt (Qwen3-4B-Thinking-2507, QwQ, the DeepSeek-R1 distills) the opening <think> is printed too."""
    from kitae.models import resolve_model_path

    path = resolve_model_path(model, "--model", adapter=True)  # before torch: a wrong path fails at once
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.vision import load_engine
    from kitae.threads import set_threads

    kwargs = template_kwargs_of(chat_template_kwargs)
    set_threads(threads, path)
    engine = load_engine(path)
    engine.set_chat(chat_template_kwargs=kwargs)
    sp = SamplingParams(temperature, top_p, 0, repetition_penalty, max_new_tokens, seed=seed)
    [[c]] = engine.generate([to_messages(prompt, system)], 1, sp)
    if raw:
        typer.echo(f"[prompt]\n{engine.tokenizer.decode(c.prompt_ids, skip_special_tokens=False)}\n[completion]",
                   err=True)
        typer.echo(c.text)
        opened = " thinking_open (the prompt opened <think>)" if c.thinking_open else ""
        typer.echo(f"[finish_reason={c.finish_reason} tokens={c.num_tokens}{opened}]", err=True)
    else:
        typer.echo(shown_answer(c))


def shown_answer(c) -> str:
    """What `kitae chat` prints of a completion: its content before the end marker, with the ``<think>`` the prompt
    opened put back in front, so the thinking shows as one block and no ``</think>`` dangles."""
    content = split_at_end(c.text, c.end_marker)[0]
    return THINK_OPEN + "\n" + content.removeprefix("\n") if c.thinking_open else content


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
    """A sample as `kitae grade` reads it; ``thinking_open``: the prompt opened a ``<think>`` block the text starts
    inside, as in the samples graders see (kitae.scoring.sample_and_grade.sample_dict)."""
    return {"output_text": c.text, "finish_reason": c.finish_reason, "completion_tokens": c.num_tokens,
            **({"thinking_open": True} if c.thinking_open else {})}

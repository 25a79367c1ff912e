"""`kitae merge` and `kitae long2short ...` (short: `kitae l2s ...`): long2short (Kimi k1.5 §2.4), turning a
long-reasoning model into a short one by weight averaging, shortest-rejection SFT data, DPO pairs, SFT and DPO.

    kitae merge runs/verbose kitae-tiny-base --out runs/merged
    kitae long2short shortest --model runs/verbose --data bundled:arith/train --out l2s/shortest.jsonl
    kitae long2short dpo-pairs --model runs/verbose --data bundled:arith/train --out l2s/pairs.jsonl
    kitae long2short dpo-pairs --samples eval_results/verbose.jsonl --out l2s/pairs.jsonl   # reuse kitae eval's samples
    kitae long2short sft --model runs/verbose --data l2s/shortest.jsonl --out runs/l2s-sft
    kitae long2short dpo --model runs/verbose --data l2s/pairs.jsonl --out runs/l2s-dpo

`kitae eval` (kitae/cli/evaluate.py) compares the models before and after. The library does the work
(kitae.long2short) and raises; this module prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kitae.cli.options import DATA_HELP, GRADER_HELP, PromptProgress, prompt_rows, sampling_params, threads_option


def register(app: typer.Typer) -> None:
    app.command("merge")(merge)
    group = typer.Typer(help="long2short (Kimi k1.5 §2.4): shortest-rejection SFT data, DPO pairs, SFT, DPO "
                        "(also `kitae l2s`).", no_args_is_help=True)
    group.command("shortest")(shortest)
    group.command("dpo-pairs")(dpo_pairs)
    group.command("sft")(sft)
    group.command("dpo")(dpo)
    app.add_typer(group, name="long2short")
    app.add_typer(group, name="l2s", hidden=True)  # the short name the docs used first: its commands keep working


def merge(
    models: list[str] = typer.Argument(..., help="Two or more model folders (or LoRA adapter folders)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the merged model."),
    weights: Optional[str] = typer.Option(None, help="Comma-separated weights, e.g. 0.5,0.5 (normalized)."),
    base: Optional[str] = typer.Option(None, help="Base model of LoRA adapters (default: the adapter's own)."),
    threads: Optional[int] = threads_option(),
) -> None:
    """Average the weights of models (Kimi k1.5 long2short model merging); LoRA adapters are merged first."""
    from kitae.errors import ConfigError
    from kitae.models import resolve_model_path
    from kitae.threads import set_threads

    paths = [resolve_model_path(m, "--model", adapter=True) for m in models]  # before torch is imported
    base = base and resolve_model_path(base, "--base")
    try:
        w = [float(x) for x in weights.split(",")] if weights else None
    except ValueError:
        raise ConfigError("--weights", f"expected numbers separated by commas, got {weights!r}") from None
    from kitae.long2short.merge import merge_models, normalize_weights

    set_threads(threads, paths[0])
    merge_models(paths, out, w, base)
    shown = ", ".join(f"{m} x {x:.3g}" for m, x in zip(models, normalize_weights(w, len(models))))
    typer.echo(f"merged {shown} -> {out}")


# options shortest and dpo-pairs share (what they sample from, how, and what counts as correct): one definition
MODEL = typer.Option(None, "--model", "-m", help="The long model to sample from.")
SAMPLES = typer.Option(None, help="Instead of --model: per-sample results of `kitae eval` (eval_results/NAME.jsonl), "
                       "so one sampling pass feeds both commands.")
DATA = typer.Option(None, "--data", "-d", help=DATA_HELP)
GRADER = typer.Option("answer", "--grader", "-g", help=GRADER_HELP)
TEMPERATURE = typer.Option(1.0, help="Sampling temperature.")
MAX_NEW_TOKENS = typer.Option(256, help="Maximum completion tokens.")
LIMIT = typer.Option(None, help="Only the first N prompts.")
SEED = typer.Option(0, help="Sampling seed.")
PASS_THRESHOLD = typer.Option(1.0, help="Correct when the grader's score is at least this.")


def _sample(model, samples, data, grader, n, temperature, max_new_tokens, limit, seed, pass_threshold, threads):
    """Shared by ``shortest`` and ``dpo-pairs``: the graded samples of each prompt, read from ``--samples`` or
    sampled now from ``--model``."""
    from kitae.errors import ConfigError
    from kitae.graders import build_grader
    from kitae.long2short.selection import read_samples, sample_groups
    from kitae.models import resolve_model_path
    from kitae.threads import set_threads

    if (model is None) == (samples is None):
        raise ConfigError("--model", "give --model (sample now) or --samples (per-sample results of `kitae eval`)")
    if samples is not None:
        return read_samples(samples)
    model = resolve_model_path(model, "--model")
    if data is None:
        raise ConfigError("--data", "give the prompt set to sample from")
    g = build_grader(grader, "--grader")
    rows = prompt_rows(data, limit)
    set_threads(threads, model)
    bar = PromptProgress(len(rows), f"sampling n={n}")
    try:
        return sample_groups(model, rows, g, n, sampling_params(temperature, max_new_tokens, seed), pass_threshold, bar)
    finally:
        bar.close()
        g.close()


def shortest(
    model: Optional[str] = MODEL,
    samples: Optional[Path] = SAMPLES,
    data: Optional[str] = DATA,
    out: Path = typer.Option(..., "--out", "-o", help="SFT rows (JSON Lines, TRL prompt-completion)."),
    grader: str = GRADER,
    n: int = typer.Option(8, "-n", help="Samples per prompt (the paper: 8)."),
    temperature: float = TEMPERATURE,
    max_new_tokens: int = MAX_NEW_TOKENS,
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
    pass_threshold: float = PASS_THRESHOLD,
    threads: Optional[int] = threads_option(),
) -> None:
    """Shortest-rejection sampling: n samples per prompt, keep the shortest correct one as an SFT target."""
    from kitae.long2short.selection import sft_rows

    groups = _sample(model, samples, data, grader, n, temperature, max_new_tokens, limit, seed, pass_threshold,
                     threads)
    _write(groups, sft_rows(groups), out, "completion_tokens")


def dpo_pairs(
    model: Optional[str] = MODEL,
    samples: Optional[Path] = SAMPLES,
    data: Optional[str] = DATA,
    out: Path = typer.Option(..., "--out", "-o", help="Preference rows (JSON Lines, TRL prompt/chosen/rejected)."),
    grader: str = GRADER,
    n: int = typer.Option(8, "-n", help="Samples per prompt."),
    ratio: float = typer.Option(1.5, help="A correct sample is rejected when at least this many times longer."),
    max_pairs: Optional[int] = typer.Option(4, help="At most this many pairs per prompt (longest rejected first)."),
    temperature: float = TEMPERATURE,
    max_new_tokens: int = MAX_NEW_TOKENS,
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
    pass_threshold: float = PASS_THRESHOLD,
    threads: Optional[int] = threads_option(),
) -> None:
    """DPO pairs: chosen = the shortest correct sample; rejected = wrong longer ones and correct ones >= 1.5x."""
    from kitae.long2short.selection import dpo_rows

    groups = _sample(model, samples, data, grader, n, temperature, max_new_tokens, limit, seed, pass_threshold,
                     threads)
    _write(groups, dpo_rows(groups, ratio, max_pairs), out, "rejected_tokens")


def _write(groups: list, rows: list[dict], out: Path, length_key: str) -> None:
    """Write the selected rows to `out` and say how many prompts gave one, and their mean `length_key`."""
    from kitae.data.loader import write_jsonl
    from kitae.long2short.selection import selection_stats

    write_jsonl(out, rows)
    stats = selection_stats(groups, rows)
    mean = sum(r[length_key] for r in rows) / len(rows) if rows else float("nan")
    typer.echo(f"{stats['prompts']} prompts, {stats['with_a_correct_sample']} with a correct sample -> "
               f"{stats['rows']} rows (mean {length_key} {mean:.1f}) in {out}")


# options sft and dpo share
EPOCHS = typer.Option(1.0, help="Passes over the data.")
MAX_STEPS = typer.Option(-1, help="Stop after this many steps (overrides epochs when > 0).")
MAX_LENGTH = typer.Option(512, help="Truncate rows to this many tokens.")


def _train(run, model, data, out, threads, epochs, lr, batch_size, max_steps, max_length, seed, **extra):
    """Shared by ``sft`` and ``dpo``: the thread count for the model, its folder checked, then TRL's trainer."""
    from kitae.long2short.train import TrainSettings
    from kitae.models import resolve_model_path
    from kitae.threads import set_threads

    settings = TrainSettings(epochs=epochs, lr=lr, batch_size=batch_size, max_steps=max_steps,
                             max_length=max_length, seed=seed)
    set_threads(threads, model)
    return run(resolve_model_path(model, "--model"), data, out, settings, **extra)


def sft(
    model: str = typer.Option(..., "--model", "-m", help="Starting model: a folder or Hub id."),
    data: Path = typer.Option(..., "--data", "-d", help="Rows from `kitae long2short shortest`."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the trained model."),
    epochs: float = EPOCHS,
    lr: float = typer.Option(5e-5, help="Learning rate (constant)."),
    batch_size: int = typer.Option(8, help="Rows per step."),
    max_steps: int = MAX_STEPS,
    max_length: int = MAX_LENGTH,
    seed: int = typer.Option(0, help="Seed."),
    threads: Optional[int] = threads_option(),
) -> None:
    """Supervised fine-tuning on the shortest correct samples, with TRL's SFTTrainer."""
    from kitae.long2short.train import sft as run_sft

    metrics = _train(run_sft, model, data, out, threads, epochs, lr, batch_size, max_steps, max_length, seed)
    typer.echo(f"SFT done: loss {metrics.get('train_loss', float('nan')):.4f} -> {out}")


def dpo(
    model: str = typer.Option(..., "--model", "-m", help="Starting model: folder or Hub id (also the DPO reference)."),
    data: Path = typer.Option(..., "--data", "-d", help="Rows from `kitae long2short dpo-pairs`."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the trained model."),
    beta: float = typer.Option(0.1, help="DPO beta: how far the policy may move from the reference."),
    epochs: float = EPOCHS,
    lr: float = typer.Option(5e-6, help="Learning rate (constant)."),
    batch_size: int = typer.Option(8, help="Pairs per step."),
    max_steps: int = MAX_STEPS,
    max_length: int = MAX_LENGTH,
    seed: int = typer.Option(0, help="Seed."),
    threads: Optional[int] = threads_option(),
) -> None:
    """DPO on (shortest correct, longer) pairs, with TRL's DPOTrainer."""
    from kitae.long2short.train import dpo as run_dpo

    metrics = _train(run_dpo, model, data, out, threads, epochs, lr, batch_size, max_steps, max_length, seed,
                     beta=beta)
    typer.echo(f"DPO done: loss {metrics.get('train_loss', float('nan')):.4f}, "
               f"reward accuracy {metrics.get('rewards/accuracies', float('nan')):.3f} -> {out}")

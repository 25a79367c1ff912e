"""`kitae plan`: the memory a training config will hold on each device, before the run (kitae.trainer.memory_plan)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

FITS, DOES_NOT_FIT, BAD_INPUT = 0, 1, 2


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)


def plan(
    config: Path = typer.Argument(..., help="YAML training config (see examples/zero_13b_one_gpu.yaml)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", metavar="SIZE", help="The trainer's GPU: 32GB, 24GiB, 80G."),
    gpus: Optional[str] = typer.Option(None, "--gpus", metavar="NxSIZE", help="Every GPU, trainer first: 2x80GB "
                                       "or 32GB,16GB (the second holds the rollout server with sampling.engine: "
                                       "server)."),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Override a config value, as in "
                                   "kitae train (repeatable)."),
    prompt_tokens: Optional[int] = typer.Option(None, "--prompt-tokens", min=1, help="Prompt length, in tokens, to "
                                                "plan for (default: 256, or what the model's context leaves)."),
    cpu: bool = typer.Option(False, "--cpu", help="Plan a CPU run (weights as kitae holds them on CPU, no CUDA "
                             "overhead); the default plans for CUDA."),
) -> None:
    """Plan the memory of a training run from CONFIG and the model's config.json (no weights are read).

    Per device: the weights (a 4-bit or 8-bit base by its quantization), the LoRA adapter, AdamW's state, the
    gradients, one micro-batch's activations (with or without gradient checkpointing), the log-prob logits,
    the in-process rollout engine's KV cache, the reference and reward models, and the framework's overhead;
    the peak, whether it fits the --gpu size, and if not, the first of these settings, tried in order, after
    which it fits: a 4-bit base, LoRA rank, micro-batch size, chunked log-probs, gradient checkpointing,
    prompts per step, group size, completion length. Exit status 0: it fits (or no size was given); 1: it does not; 2: bad input.
    The numbers are estimates checked against peaks measured on CPU (docs/scale.md#memory-plan).
    """
    from kitae.errors import KitaeError
    from kitae.trainer.memory_plan import first_fit, fixes, format_plan, load_setup, make_plan, parse_gpus, parse_size

    try:
        if gpu and gpus:
            raise KitaeError("give --gpu SIZE or --gpus NxSIZE, not both")
        sizes = parse_gpus(gpus) if gpus else [parse_size(gpu)] if gpu else []
        setup = load_setup(config, list(set_), cuda=not cpu, prompt_tokens=prompt_tokens)
        the_plan = make_plan(setup, sizes)
        typer.echo(f"memory plan for {config} (model {setup.cfg.model.path}, {'CPU' if cpu else 'CUDA'}; "
                   f"prompts of {setup.prompt_tokens} tokens)")
        typer.echo(format_plan(the_plan))
        fits = the_plan.fits()
        if fits is not False:
            raise typer.Exit(FITS)
        found = first_fit(config, list(set_), sizes, not cpu, prompt_tokens)
        if found is None:
            tried = ", ".join(o for o, _ in fixes(setup)) or "nothing left to try"
            typer.echo(f"does not fit, and no setting tried fits ({tried}): a larger device, or several")
        else:
            settings, fitted = found
            typer.echo("does not fit; it fits with: " + " ".join(f"--set '{s}'" for s in settings))
            typer.echo(format_plan(fitted, concise=True))
    except KitaeError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(BAD_INPUT) from None
    raise typer.Exit(DOES_NOT_FIT)

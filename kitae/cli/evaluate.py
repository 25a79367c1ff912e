"""`kitae eval`: models side by side on one prompt set: pass@1 over k samples, completion length, template
compliance, and the token-efficiency frontier (how Kimi k1.5's long2short results are compared).

    kitae eval --model runs/verbose --model merged=runs/merged --data bundled:arith/test --grader answer -k 8

The library does the work (kitae.long2short.compare) and raises; this module prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kitae.cli.options import (DATA_HELP, GRADER_HELP, PromptProgress, answer_pattern_option, config_option,
                               field_option, read_prompt_set, sampling_params, system_option, template_kwargs_option,
                               threads_option)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_models)


def eval_models(
    model: list[str] = typer.Option(..., "--model", "-m",
                                    help="Model folder, Hub id or LoRA adapter folder, or NAME=MODEL (repeatable)."),
    data: Optional[str] = typer.Option(None, "--data", "-d", show_default=False,
                                       help=DATA_HELP + " Default: the --config's data.eval, else bundled:arith/test."),
    config: Optional[Path] = config_option(),
    field: list[str] = field_option(),
    answer_pattern: Optional[str] = answer_pattern_option(),
    system: Optional[str] = system_option(),
    chat_template_kwargs: Optional[str] = template_kwargs_option(),
    grader: str = typer.Option("answer", "--grader", "-g", help=GRADER_HELP),
    k: int = typer.Option(8, "-k", help="Samples per prompt; pass@1 is averaged over them."),
    temperature: float = typer.Option(1.0, help="Sampling temperature (0 = greedy)."),
    max_new_tokens: int = typer.Option(256, help="Maximum completion tokens."),
    limit: Optional[int] = typer.Option(None, help="Only the first N prompts."),
    pass_threshold: float = typer.Option(1.0, help="A sample passes when its score is at least this."),
    seed: int = typer.Option(0, help="Sampling seed (the same for every model)."),
    out: Path = typer.Option(Path("eval_results"), "--out", "-o", help="Folder for per-sample results (NAME.jsonl "
                             "per model and summary.json); the default is in the current folder (git ignores it in "
                             "a kitae checkout)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of a table."),
    threads: Optional[int] = threads_option(),
) -> None:
    """pass@1 over k samples, mean/p90 completion tokens and template compliance, per model, in one table,
    then score against mean tokens (the token-efficiency view of Kimi k1.5's long2short figure).

    The prompts are read as `kitae train` reads them: --config takes a training config's data.fields,
    answer_pattern, system and model.chat_template_kwargs; --field, --answer-pattern, --system and
    --chat-template-kwargs give them (over the config's)."""
    from jinja2 import TemplateError

    from kitae.errors import ConfigError
    from kitae.graders import build_grader
    from kitae.long2short.compare import (ModelReport, efficiency_plot, evaluate_model, format_table, mark_frontier,
                                   parse_model_arg, unique_names, write_results)
    from kitae.models import check_tokenizer_files, resolve_model_path
    from kitae.threads import set_threads

    parsed = [parse_model_arg(m) for m in model]
    for _, path in parsed:  # every model before any work, so the third one's typo does not waste the first's
        check_tokenizer_files(resolve_model_path(path, "--model", adapter=True), "--model")
    prompts = read_prompt_set(data, limit, config, field, answer_pattern, system, chat_template_kwargs)
    rows = prompts.rows
    g = build_grader(grader, "--grader")
    reports = []
    try:
        for name, (_, path) in zip(unique_names([n for n, _ in parsed]), parsed):
            set_threads(threads, path)
            bar = PromptProgress(len(rows), f"{name} (k={k})")
            try:
                metrics, results = evaluate_model(path, rows, g, k, sampling_params(temperature, max_new_tokens, seed),
                                                  pass_threshold, progress=bar,
                                                  chat_template_kwargs=prompts.chat_template_kwargs,
                                                  environment=prompts.environment)
            except TemplateError as exc:  # the model's own template refused the prompt (raise_exception)
                raise ConfigError("--model", f"the chat template of {path} stopped: {exc}; if it needs variables, "
                                  "give them with --chat-template-kwargs JSON (or model.chat_template_kwargs in "
                                  "the --config)") from None
            finally:
                bar.close()
            reports.append(ModelReport(name, path, metrics, results))
    finally:
        g.close()
    mark_frontier(reports)
    files = write_results(reports, out)
    if as_json:
        typer.echo(json.dumps([r.summary() for r in reports], indent=2, ensure_ascii=False))
        return
    typer.echo(format_table(reports))
    typer.echo("\n" + efficiency_plot(reports))
    typer.echo(f"\n* = token-efficiency frontier. Per-sample results: {', '.join(str(f.resolve()) for f in files)}")

"""``kitae curate``: prompt-set curation before RL, one command per step plus ``run`` for a chain.

    kitae curate format     --data train.jsonl --out curated/format.jsonl
    kitae curate dedupe     --data train.jsonl --out curated/dedupe.jsonl --eval test.jsonl
    kitae curate difficulty --data train.jsonl --out curated/difficulty.jsonl -n 10 --drop-solved
    kitae curate hackable   --data train.jsonl --out curated/hackable.jsonl --drop
    kitae curate balance    --data curated/difficulty.jsonl --out curated/balanced.jsonl --bands hard=1,medium=1,easy=1
    kitae curate testcases  --data kitae/assets/data/code/problems.jsonl --out curated/code.jsonl
    kitae curate run --steps format,dedupe,difficulty,balance --data train.jsonl --out curated/
    kitae curate run --recipe recipe.yaml

Every step also takes ``--set key=value`` for any setting of its config (see ``kitae.curate.<step>``).
The library does the work and raises; this module prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from kitae.cli.options import threads_option

DATA_HELP = "Prompt set (.jsonl, .json, .parquet or a datasets folder). Never written to."
OUT_HELP = "Output .jsonl; the dropped rows and the report go beside it (NAME.dropped.jsonl, NAME.report.json)."
SET_HELP = "Any setting of this step: --set key=value (repeatable; values read as YAML)."
MODEL_HELP = "Model folder or Hub id (ORG/NAME[@REVISION]); default: the bundled tiny base model."


def register(app: typer.Typer) -> None:
    curate = typer.Typer(help="Curate a prompt set before RL: format, dedupe, difficulty, hackable, balance, "
                              "and test cases for coding problems.", no_args_is_help=True)
    for command in (format_, dedupe, difficulty, hackable, balance, testcases, run):
        curate.command(command.__name__.rstrip("_"))(command)
    app.add_typer(curate, name="curate")


# ---- shared ------------------------------------------------------------------------------------
def _progress_factory(quiet: bool):
    from tqdm import tqdm

    def make(desc: str, total: int):
        bar = tqdm(total=total, desc=desc, unit="prompt", leave=False, disable=quiet or total == 0)

        def update(n: int) -> None:
            bar.update(n)
            if bar.n >= total:
                bar.close()

        return update

    return make


def _single(name: str, data: Path, out: Path, settings: dict[str, Any], set_: list[str], quiet: bool,
            restart: bool = False, threads: Optional[int] = None) -> None:
    from kitae.config import apply_overrides
    from kitae.curate.chain import check_paths, parse_step, run_step, step_files
    from kitae.data.loader import load_prompts

    check_paths([data], list(step_files(out).values()))
    cfg = apply_overrides({k: v for k, v in settings.items() if v is not None}, list(set_))
    planned = parse_step(name, cfg, "")
    rows = load_prompts(data)
    if name in SAMPLED and not restart:
        _resume_note(name, out, len(rows))
    try:
        result = run_step(planned, rows, out, str(data), _progress_factory(quiet), restart=restart, threads=threads)
    except KeyboardInterrupt:
        _interrupted(name, out, len(rows))
    typer.echo(result.report.render())
    files = step_files(out)
    typer.echo(f"wrote {len(result.rows)} rows to {out}; dropped rows: {files['dropped']}; report: {files['report']}")


def _mix(text: Optional[str], option: str) -> Optional[dict[str, float]]:
    """'hard=1,medium=2' -> {'hard': 1.0, 'medium': 2.0}."""
    if not text:
        return None
    from kitae.errors import ConfigError

    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(option, f"expected name=share pairs such as hard=1,medium=1; got {part!r}") from None
        if not sep or not key.strip():
            raise ConfigError(option, f"expected name=share pairs such as hard=1,medium=1; got {part!r}")
    return out


SAMPLED = ("difficulty", "hackable")  # the steps that sample a model and keep a progress file


def _progress_path(out: Path) -> Path:
    from kitae.curate.step import Context

    return Context(out=out).sidecar("progress.jsonl")


def _resume_note(step: str, out: Path, total: int) -> None:
    from kitae.curate.sampling import prompts_done

    done = prompts_done(_progress_path(out))
    if done:
        typer.echo(f"[{step}] resuming: {done} of {total} prompts are already in {_progress_path(out)}", err=True)


def _interrupted(step: str, out: Path, total: int) -> None:
    """Ctrl-C: say where a sampling step stopped and that the same command resumes; exit 130 (as shells do)."""
    from kitae.curate.sampling import prompts_done

    progress = _progress_path(out)
    if step in SAMPLED and not prompts_done(progress):
        typer.echo(f"\n[{step}] stopped (Ctrl-C) before its first batch of prompts was done; nothing was saved.",
                   err=True)
    elif step in SAMPLED:
        done = prompts_done(progress)
        typer.echo(f"\n[{step}] stopped (Ctrl-C) after {done} of {total} prompts; their samples are saved in "
                   f"{progress}. Run the same command again to resume from there (--restart starts over).",
                   err=True)
    else:
        typer.echo(f"\n[{step}] stopped (Ctrl-C); nothing was written to {out}.", err=True)
    raise typer.Exit(130)


Data = typer.Option(..., "--data", "-d", help=DATA_HELP)
Out = typer.Option(..., "--out", "-o", help=OUT_HELP)
Set = typer.Option([], "--set", help=SET_HELP)
Quiet = typer.Option(False, "--quiet", "-q", help="No progress bars.")


# ---- steps -------------------------------------------------------------------------------------
def format_(
    data: Path = Data, out: Path = Out,
    action: str = typer.Option("drop", help="drop or tag (adds format_tags) the prompts a rule matches."),
    disable: list[str] = typer.Option([], help="A built-in rule to switch off (repeatable)."),
    set_: list[str] = Set, quiet: bool = Quiet,
) -> None:
    """Find multiple-choice, true/false and proof prompts (English and Japanese rules); drop or tag them."""
    _single("format", data, out, {"action": action, "disable": list(disable) or None}, set_, quiet)


def dedupe(
    data: Path = Data, out: Path = Out,
    eval_: list[Path] = typer.Option([], "--eval", help="Eval set to decontaminate against (repeatable)."),
    threshold: float = typer.Option(0.9, help="Embedding cosine at or above which two prompts are one."),
    ngram_threshold: float = typer.Option(0.92, help="Character n-gram cosine for near-verbatim copies."),
    model: str = typer.Option("all-MiniLM-L6-v2", help="Sentence-transformers model: the packaged name or a folder."),
    no_embed: bool = typer.Option(False, "--no-embed", help="Skip the embedding layer (text layers only)."),
    set_: list[str] = Set, quiet: bool = Quiet, threads: Optional[int] = threads_option(),
) -> None:
    """Drop exact, normalized and near-duplicate prompts, and prompts that overlap an eval set."""
    settings = {"eval": [str(p) for p in eval_], "threshold": threshold, "ngram_threshold": ngram_threshold,
                "model": model, "embedding": not no_embed}
    _single("dedupe", data, out, settings, set_, quiet, threads=threads)


def difficulty(
    data: Path = Data, out: Path = Out,
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    n: int = typer.Option(10, "-n", help="Samples per prompt."),
    temperature: float = typer.Option(1.0, help="Sampling temperature (high, as in Kimi k1.5)."),
    max_new_tokens: int = typer.Option(128, help="Maximum new tokens per sample."),
    grader: str = typer.Option("answer", help="Grader spec: a type name, inline YAML or a spec file."),
    seed: int = typer.Option(0, help="Sampling seed: the same seed gives the same pass rates."),
    drop_solved: bool = typer.Option(False, help="Drop prompts solved n/n times."),
    drop_unsolved: bool = typer.Option(False, help="Drop prompts solved 0/n times."),
    restart: bool = typer.Option(False, help="Ignore the progress file of an earlier run and start over."),
    set_: list[str] = Set, quiet: bool = Quiet, threads: Optional[int] = threads_option(),
) -> None:
    """Pass rate of n samples per prompt as its difficulty; resumable (OUT-stem.progress.jsonl)."""
    settings = {"model": model, "n": n, "temperature": temperature, "max_new_tokens": max_new_tokens,
                "grader": grader, "seed": seed, "drop_solved": drop_solved, "drop_unsolved": drop_unsolved}
    _single("difficulty", data, out, settings, set_, quiet, restart, threads)


def hackable(
    data: Path = Data, out: Path = Out,
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    n: int = typer.Option(8, "-n", help="Guesses per prompt (Kimi k1.5: 8)."),
    max_new_tokens: int = typer.Option(16, help="Short: a guess is the answer alone."),
    grader: str = typer.Option("answer", help="Grader spec: a type name, inline YAML or a spec file."),
    seed: int = typer.Option(0, help="Sampling seed."),
    drop: bool = typer.Option(False, help="Drop guessable prompts (default: tag them)."),
    restart: bool = typer.Option(False, help="Ignore the progress file of an earlier run and start over."),
    set_: list[str] = Set, quiet: bool = Quiet, threads: Optional[int] = threads_option(),
) -> None:
    """Ask for the answer with no reasoning n times; a prompt answered right is guessable."""
    settings = {"model": model, "n": n, "max_new_tokens": max_new_tokens, "grader": grader,
                "seed": seed, "drop": drop}
    _single("hackable", data, out, settings, set_, quiet, restart, threads)


def balance(
    data: Path = Data, out: Path = Out,
    domains: Optional[str] = typer.Option(None, help="Target domain mix, e.g. arithmetic=2,general=1."),
    bands: Optional[str] = typer.Option(None, help="Target band mix, e.g. hard=1,medium=1,easy=1."),
    band_field: str = typer.Option("pass_rate", help="Row field of the band: a pass rate or a label."),
    domain_field: Optional[str] = typer.Option(None, help="Row field of the domain (default: rules)."),
    size: Optional[int] = typer.Option(None, help="Rows out (default: the most the mix allows without repeats)."),
    seed: int = typer.Option(0, help="Sampling seed."),
    set_: list[str] = Set, quiet: bool = Quiet,
) -> None:
    """Tag domains and difficulty bands; resample to a target mix."""
    settings = {"domains": _mix(domains, "--domains"), "bands": _mix(bands, "--bands"), "band_field": band_field,
                "domain_field": domain_field, "size": size, "seed": seed}
    _single("balance", data, out, settings, set_, quiet)


def testcases(
    data: Path = Data, out: Path = Out,
    cases: int = typer.Option(50, help="Test inputs to generate per problem (Kimi k1.5: 50)."),
    solutions: int = typer.Option(10, help="Reference solutions sampled per problem (Kimi k1.5: 10)."),
    agree: int = typer.Option(7, help="Keep a case when at least this many solutions agree on its output (7)."),
    min_pass: int = typer.Option(9, help="Keep a problem when at least this many solutions pass every kept case (9)."),
    time_limit: float = typer.Option(2.0, help="CPU seconds per case and program."),
    workers: int = typer.Option(2, help="Sandboxes running at once."),
    seed: int = typer.Option(0, help="Seed for sampling the solutions."),
    sandbox: str = typer.Option("bwrap", help="bwrap (isolated), or none: unisolated, only for code you trust."),
    set_: list[str] = Set, quiet: bool = Quiet,
) -> None:
    """Test cases for coding problems, from each row's CYaRon generator, kept where its solutions agree.

    A problem stays when most solutions pass its cases (Kimi k1.5: 50 cases, 10 solutions, 7 agree, 9 pass).
    Generators and solutions run in the sandbox.
    """
    settings = {"cases": cases, "solutions": solutions, "agree": agree, "min_pass": min_pass,
                "time_limit": time_limit, "workers": workers, "seed": seed, "sandbox": sandbox}
    _single("testcases", data, out, settings, set_, quiet)


# ---- chains ------------------------------------------------------------------------------------
def run(
    steps: Optional[str] = typer.Option(None, help="Comma-separated steps, e.g. format,dedupe,difficulty,balance."),
    recipe: Optional[Path] = typer.Option(None, help="YAML recipe with data, out and steps (settings per step)."),
    data: Optional[Path] = typer.Option(None, "--data", "-d", help=DATA_HELP + " Overrides the recipe's."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder. Overrides the recipe's."),
    set_: list[str] = typer.Option([], "--set", help="A step's setting: --set dedupe.threshold=0.85 (repeatable)."),
    restart: bool = typer.Option(False, help="Ignore progress files of an earlier run."),
    quiet: bool = Quiet,
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="Torch CPU threads for the model steps. "
                                          "Overrides the recipe's; default: chosen from each model's size."),
) -> None:
    """Run steps in order, each on the previous one's output; files per step, curated.jsonl and report.json."""
    from kitae.curate.chain import chain_summary, check_paths, load_recipe, parse_steps, run_chain
    from kitae.data.loader import load_prompts
    from kitae.errors import ConfigError

    spec = load_recipe(recipe) if recipe else {}
    if steps:
        spec["steps"] = [s.strip() for s in steps.split(",") if s.strip()]
    data = data or (Path(spec["data"]) if spec.get("data") else None)
    out = out or (Path(spec["out"]) if spec.get("out") else None)
    if data is None or out is None or "steps" not in spec:
        raise ConfigError("run", "give --data, --out and --steps (or a --recipe that has them)")
    planned = parse_steps(spec["steps"], list(set_))
    check_paths([data], [out / "curated.jsonl"] + [out / f"{k:02d}-{p.name}.jsonl" for k, p in enumerate(planned, 1)])
    rows = load_prompts(data)

    done: list = []

    def show(name: str, result) -> None:
        done.append(result)
        typer.echo(result.report.render() + "\n")

    threads = threads if threads is not None else spec.get("threads")
    try:
        results = run_chain(planned, rows, out, str(data), _progress_factory(quiet), restart, on_step=show,
                            threads=threads)
    except KeyboardInterrupt:
        k = len(done)
        _interrupted(planned[k].name, out / f"{k + 1:02d}-{planned[k].name}.jsonl",
                     len(done[-1].rows) if done else len(rows))
    typer.echo(f"chain: {len(rows)} rows in, {len(results[-1].rows)} out\n" + chain_summary(results))
    typer.echo(f"wrote {out / 'curated.jsonl'}; per-step files and report.json in {out}")

"""Prompt-set curation before RL (Kimi k1.5 §2.1): ``kitae curate``.

Steps, each runnable alone or chained, each writing a new dataset plus a report and never touching its input:

    format       drop or tag multiple-choice, true/false and proof prompts (English and Japanese rules)
    dedupe       exact, normalized-text, character n-gram and embedding near-duplicates; decontamination
    difficulty   pass rate of n samples from the current model (Kimi: 10 at a high temperature)
    hackable     answers the model guesses with no reasoning (Kimi: N = 8)
    balance      domain and difficulty-band tags, resampled to a target mix
    testcases    test cases for coding problems: generated, cross-checked by reference solutions (in the sandbox)

From Python::

    from kitae.curate import parse_step, run_step, parse_steps, run_chain
    from kitae.data.loader import load_prompts

    rows = load_prompts("kitae/assets/data/arith/train.jsonl")
    result = run_step(parse_step("dedupe", {"threshold": 0.9}, ""), rows)
    print(result.report.render())             # result.rows, result.dropped

    steps = parse_steps(["format", "dedupe", {"difficulty": {"n": 10}}, "balance"])
    run_chain(steps, rows, Path("curated"))   # from pathlib import Path

Each step is registered by name in :data:`kitae.curate.step.STEPS` (see that module to add one).
"""

from kitae.curate.chain import PlannedStep, load_recipe, parse_step, parse_steps, run_chain, run_step
from kitae.curate.report import StepReport, Table
from kitae.curate.step import STEPS, Context, Dropped, Step, StepResult

__all__ = [
    "STEPS",
    "Context",
    "Dropped",
    "PlannedStep",
    "Step",
    "StepReport",
    "StepResult",
    "Table",
    "load_recipe",
    "parse_step",
    "parse_steps",
    "run_chain",
    "run_step",
]

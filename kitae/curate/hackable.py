"""``hackable``: prompts whose answer the model guesses without reasoning (Kimi k1.5 §2.1).

Kimi k1.5: "we prompt the model to guess potential answers without any CoT reasoning steps. If the model
predicts the correct answer within N attempts, the prompt is considered too easy-to-hack and removed. We
found that setting N = 8 can remove the majority of easy-to-hack prompts." Such prompts reward a right
final answer reached by wrong reasoning.

Here: the last user turn gets an instruction to answer with the final answer only (``instruction_en`` or
``instruction_ja``, chosen by the row's ``lang`` or the detected language), ``n`` samples (default 8) with a
short ``max_new_tokens`` (16) are graded like ``difficulty``, and a prompt is guessable when at least
``min_hits`` (1) of them pass. Rows get ``guess_rate`` and ``guessable``; with ``drop`` guessable rows go.

On a short-answer task (the bundled arithmetic) the model never reasons anyway, so guessable ≈ "solved
without the instruction" too; the step earns its keep on reasoning data whose answers are easy to guess.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kitae.curate.difficulty import SampledStepConfig, describe, example_rows, run_graded
from kitae.curate.report import StepReport
from kitae.curate.step import Context, Dropped, Step, StepResult
from kitae.curate.text import row_lang

INSTRUCTION_EN = "Answer with only the final answer. Do not show any reasoning."
INSTRUCTION_JA = "途中の考え方は書かずに、最終的な答えだけを答えてください。"


@dataclass
class HackableConfig(SampledStepConfig):
    n: int = 8
    max_new_tokens: int = 16
    min_hits: int = 1
    drop: bool = False
    instruction_en: str = INSTRUCTION_EN
    instruction_ja: str = INSTRUCTION_JA


def guess_messages(row: dict, cfg: HackableConfig) -> list[dict]:
    """The row's messages with the no-reasoning instruction appended to the last user turn."""
    ja = row_lang(row) == "ja"
    instruction, sep = (cfg.instruction_ja, "\n") if ja else (cfg.instruction_en, "\n\n")
    messages = [dict(m) for m in row["messages"]]
    messages[-1]["content"] = messages[-1]["content"] + sep + instruction
    return messages


def run_hackable(rows: list[dict], cfg: HackableConfig, ctx: Context) -> StepResult:
    t0 = time.perf_counter()
    prompts = [guess_messages(r, cfg) for r in rows]
    results = run_graded(rows, prompts, cfg, ctx, "hackable",
                         instruction_en=cfg.instruction_en, instruction_ja=cfg.instruction_ja)
    report = StepReport("hackable", rows_in=len(rows))
    kept, dropped = [], []
    for i, (row, res) in enumerate(zip(rows, results)):
        guessable = res.passes >= cfg.min_hits
        out = {**row, "guess_rate": None if res.rate is None else round(res.rate, 4), "guessable": guessable}
        if guessable and cfg.drop:
            report.drop("guessable")
            dropped.append(Dropped(out, "guessable", {"row": i + 1, "hits": res.passes, "graded": res.graded}))
            continue
        if guessable:
            report.tag("guessable")
        kept.append(out)
    report.rows_out = len(kept)
    describe(report, rows, results, cfg.n, "guess rate", "hits")
    report.stats.update({"model": cfg.model or "bundled", "n": cfg.n, "min_hits": cfg.min_hits,
                         "guessable": sum(r.passes >= cfg.min_hits for r in results),
                         "seconds": round(time.perf_counter() - t0, 1)})
    report.examples = example_rows(rows, results, lambda r: r.passes >= cfg.min_hits, passing=cfg.pass_threshold)
    return StepResult(kept, dropped, report)


STEP = Step("hackable", HackableConfig, run_hackable)

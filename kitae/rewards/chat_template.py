"""Chat-template compliance reward (GRPO-zero recipe, reward 1).

The GRPO-zero recipe: a completion that ends its turn with ``<|im_end|>`` and is well formed gets +1.0 × length factor; one
that is not gets -5.0; one shorter than 15 characters gets -5.0 ("hard rejection").

kitae's reading, every constant configurable (spec fields of ``type: template``):

    reward: 1.0          # compliant and long enough: reward × length_factor(chars)
    penalty: -5.0        # not compliant (see `template_violation` for what that means)
    min_chars: 15        # compliant but fewer content characters than this ...
    short_penalty: -5.0  # ... gets this. Set min_chars: 1 for tasks whose answers are "47".
    full_chars: 100      # length factor = min(1, chars / full_chars); 0 turns it off (open choice, see common.py)
    end_marker: null     # the model's end of turn (the rollout's sample["end_marker"]); "<|im_end|>" when unknown
    stray_tokens: null   # the model's control tokens (the rollout's sample["control_tokens"]: its tokenizer's
                         # special tokens, e.g. Llama 3's <|start_header_id|>); ChatML's three when unknown

Characters are counted on the content before the end marker, stripped (Python code points, so "東京" is 2).
Departures and open choices: the recipe does not say what "well formed" means beyond the end marker; kitae uses
:func:`kitae.chat.is_template_compliant` (no text after the marker, no other template token inside, not cut at
the length limit, not empty), and reports *why* a completion failed in the grade's reason. "Other template
token" is per family: every control token of the model that wrote the completion (kitae.chat.control_tokens),
ChatML's ``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>`` for a ChatML model.
"""

from __future__ import annotations

from dataclasses import dataclass

from kitae.chat import IM_END, TEMPLATE_TOKENS, sample_controls, sample_end, split_at_end
from kitae.config import setting
from kitae.rewards.common import Reward, content_of, length_factor


@dataclass(frozen=True)
class TemplateConfig:
    reward: float = 1.0
    penalty: float = -5.0
    min_chars: int = setting(15, minimum=0)
    short_penalty: float = -5.0
    full_chars: int = setting(100, minimum=0)  # 0: no length factor
    end_marker: str | None = None  # None: the model's (the sample's end_marker), else <|im_end|>
    stray_tokens: tuple[str, ...] | None = None  # None: the model's (the sample's control_tokens), else ChatML's


def template_violation(
    text: str,
    finish_reason: str | None = None,
    end: str = IM_END,
    stray_tokens: tuple[str, ...] = TEMPLATE_TOKENS,
) -> str | None:
    """Why `text` breaks the chat template, or None when it complies.

    Same verdicts as :func:`kitae.chat.is_template_compliant` with the defaults, plus a reason for people.
    """
    if finish_reason == "length":
        return "cut at the length limit"
    content, ended = split_at_end(text, end)
    if not ended:
        return f"no end marker {end}"
    if text.rstrip().removesuffix(end).rstrip() != content.rstrip():
        return f"text after the end marker {end}"
    for token in stray_tokens:
        if token in content:
            return f"stray template token {token}"
    if not content.strip():
        return "empty answer"
    return None


def template_reward(text: str, finish_reason: str | None = None, cfg: TemplateConfig = TemplateConfig(),
                    end: str | None = None, controls: tuple[str, ...] | None = None) -> Reward:
    """The template reward of one completion; metrics: compliant (1/0), chars, length_factor. The end marker is
    ``cfg.end_marker`` when set, else `end` (the model's), else ``<|im_end|>``; the stray tokens
    ``cfg.stray_tokens`` when set, else `controls` (the model's), else ChatML's.

    >>> template_reward("東京は日本の首都です。<|im_end|>", cfg=TemplateConfig(min_chars=10, full_chars=20)).score
    0.55
    >>> template_reward("47<|im_end|>").score  # compliant but 2 < 15 characters
    -5.0
    """
    end = sample_end({"end_marker": end}, cfg.end_marker)
    chars = len(content_of(text, end))
    stray = sample_controls({"control_tokens": controls}, cfg.stray_tokens)
    violation = template_violation(text, finish_reason, end, stray)
    metrics: dict[str, float | None] = {"compliant": 0.0 if violation else 1.0, "chars": float(chars)}
    if violation:
        return Reward(cfg.penalty, metrics, violation)
    if chars < cfg.min_chars:
        return Reward(cfg.short_penalty, metrics, f"{chars} characters < min_chars {cfg.min_chars}")
    factor = length_factor(chars, cfg.full_chars)
    metrics["length_factor"] = factor
    return Reward(cfg.reward * factor, metrics)

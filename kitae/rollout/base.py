"""The rollout engine interface: G completions per prompt, with what the trainer needs to learn from them.

An engine takes chat prompts and returns, per prompt, `n` :class:`Completion` s: the text (the end marker kept, so
graders can check the template) and that marker (the model's own: ``<|eot_id|>`` for Llama 3, kitae.chat.EndMarker), prompt and completion token ids, the sampling policy's per-token log-probs, and
why the sample ended ("stop", "length", or "repeat").

Log-probs are those of the temperature-scaled model distribution, log_softmax(logits / T), at the sampled tokens,
*before* top-k, top-p and repetition penalty (the convention of TRL; vLLM returns it with ``--logprobs-mode
processed_logprobs`` when top-k, top-p and the penalty are off; its default raw log-probs ignore the
temperature). This is the
quantity the trainer recomputes for the current policy, so the two form a proper importance ratio.

Image prompts (a vision-language model): the in-process engine samples them (kitae.rollout.vision), and each
Completion carries its prompt's image tensors (``image_inputs``) for the policy update.

Keep this interface small: the in-process engine (``hf``) and the inference-server engine (``server``,
kitae.rollout.server) implement the same `generate`.
Partial rollouts (kitae.rollout.partial) also need ``generate_tokens(prompt_ids, n, sampling)``: the same, from
token ids (a prompt followed by the part of a completion sampled earlier), so a trajectory continues token for
token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

from kitae.chat import END_OF_TEXT, IM_END, TEMPLATE_TOKENS, Message
from kitae.registry import Registry

CHATML_STOPS = (IM_END, END_OF_TEXT)  # where every sample stops by default, whatever the model

ENGINES = Registry("rollout engine")
ENGINES.register_lazy("hf", "kitae.rollout.hf:HFEngine")
ENGINES.register_lazy("server", "kitae.rollout.server:ServerEngine")  # vLLM, SGLang, kitae serve model


@dataclass
class SamplingParams:
    """Sampling settings. temperature 0 means greedy. `seed` makes a call reproducible."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    repetition_penalty: float = 1.0
    max_new_tokens: int = 128
    # None: CHATML_STOPS and every end text of the model (kitae.chat.EndMarker; the engine resolves it, see
    # HFEngine.ending); a list: exactly those strings ([] = run on to max_new_tokens)
    stop: list[str] | None = None
    seed: int | None = None
    # Repeat detection (Kimi k1.5 §2.6.2): end a sample with finish_reason "repeat" once its last tokens are one
    # block of 1..repeat_max_period tokens repeated >= repeat_min_count times, covering >= repeat_min_span tokens.
    repeat_min_count: int = 0  # 0 = off
    repeat_max_period: int = 16
    repeat_min_span: int = 16

    def offset_seed(self, offset: int) -> "SamplingParams":
        """A copy whose seed is ``seed + offset`` (no seed stays no seed): batch b of a set samples with
        ``offset_seed(first row of b)``, so a batch gives the same samples however the set is split or resumed."""
        return dataclasses.replace(self, seed=None if self.seed is None else self.seed + offset)


@dataclass
class Completion:
    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]  # one per completion token
    finish_reason: str  # "stop" | "length" | "repeat"
    earlier_tokens: int = 0  # partial rollouts: leading completion tokens sampled in earlier iterations
    # vision-language models: the processor's image tensors of the prompt ({"pixel_values": [n_images, C, H, W],
    # ...}, dim 0 per image or patch), shared by the samples of one prompt; the policy update feeds them again
    image_inputs: dict[str, Any] | None = None
    end_marker: str = IM_END  # the model's end of turn (kitae.chat.EndMarker.text): where graders cut the content
    policy_version: int | None = None  # async rollouts (kitae.rollout.worker): the policy version (optimizer
    # steps taken) whose weights sampled it; None where the engine samples with the trainer's current weights
    control_tokens: tuple[str, ...] = TEMPLATE_TOKENS  # the model's (EndMarker.controls): stray inside the content

    @property
    def num_tokens(self) -> int:
        return len(self.completion_ids)


class RolloutEngine(Protocol):
    def generate(
        self, prompts: list[list[Message]], n: int, sampling: SamplingParams
    ) -> list[list[Completion]]:
        """`n` completions for each prompt (a chat message list), in prompt order."""
        ...

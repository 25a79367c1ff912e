"""The rollout engine interface: G completions per prompt, with what the trainer needs to learn from them.

An engine takes chat prompts and returns, per prompt, `n` :class:`Completion` s: the text (the end marker kept, so
graders can check the template) and that marker (the model's own: ``<|eot_id|>`` for Llama 3, kitae.chat.EndMarker), prompt and completion token ids, the sampling policy's per-token log-probs, and
why the sample ended ("stop", "length", or "repeat").

Log-probs are those of the temperature-scaled model distribution, log_softmax(logits / T), at the sampled tokens,
*before* top-k, top-p and repetition penalty (the convention of TRL; vLLM returns it with ``--logprobs-mode
processed_logprobs`` when top-k, top-p and the penalty are off; its default raw log-probs ignore the
temperature). This is the
quantity the trainer recomputes for the current policy, so the two form a proper importance ratio.

Image prompts (a vision-language model): the in-process engine samples them (its image form, kitae.rollout.vision,
picked through the engine's class: :class:`SamplesImages`), and each
Completion carries its prompt's image tensors (``image_inputs``) for the policy update.

Keep this interface small: :class:`RolloutEngine` (``generate``) is all an engine must have; a class with only
that trains. What else an engine can do is an ability: a small class of its own that the engine subclasses (the
claim) and implements (its abstract methods), which the trainer checks with ``isinstance`` (or ``issubclass``, for
the class-level ones). Abilities are nominal: having an ability's names (or a flag such as ``remote_logprobs =
False``) claims nothing; only subclassing does. The trainer never probes attributes or the engine's registered
name (tests/rollout/test_protocols.py checks that every claim is implemented and nothing else is taken for one):

- :class:`EncodesPrompts`: applies the model's chat template itself (the run's ``model.chat_template_kwargs``
  and ``model.end_marker``); pre-flight measures the prompts with it;
- :class:`ContinuesTokens`: samples from token ids (a prompt followed by the part of a completion sampled
  earlier), so a trajectory continues token for token: partial rollouts (kitae.rollout.partial) and
  ``sampling.async`` (kitae.rollout.async_runners) need it;
- :class:`SamplesInWorker`: samples with the trainer's own model and can be built again over a copy of it:
  ``sampling.async`` samples with that copy in a rollout worker process (kitae.rollout.async_runners);
- :class:`SyncsWeights`: samples with its own copy of the weights (servers): the trainer pushes the policy's, the
  engine keeps the version it holds;
- :class:`RemoteLogprobs`: its log-probs come from other kernels than the trainer's: the trainer recomputes its
  own and corrects for the mismatch (kitae.algorithms.mismatch);
- :class:`ReportsStats`: metrics of its own each step (``take_stats``);
- :class:`SavesState`: state that a checkpoint holds and a resumed run gets back;
- :class:`ReadsRows`: it gets each prompt's dataset row with it (an agent's environment resets from the row's
  fields, kitae.agents.engine);
- :class:`ChecksServers` (class level): pre-flight asks its servers before the model loads;
- :class:`SamplesImages` (class level): it has a form for a vision-language model's image prompts, which a run
  with such a model builds instead (``for_images``);
- :class:`BuiltFromConfig` (class level): built from the sampling settings, not as ``cls(policy, tokenizer)``.

The in-process engine (``hf``, kitae.rollout.hf) claims the first three and :class:`SamplesImages`; the
inference-server engine (``server``, kitae.rollout.server) all but :class:`SamplesInWorker`, :class:`SavesState`,
:class:`ReadsRows` and :class:`SamplesImages`. Both read tokens the same way:
one :class:`kitae.rollout.codec.TokenCodec` each (the chat template, the end marker, stop strings, decoding).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from kitae.chat import END_OF_TEXT, IM_END, TEMPLATE_TOKENS, EndMarker, Message
from kitae.config import Variant
from kitae.registry import Registry
from kitae.rollout.trajectory import Episode

CHATML_STOPS = (IM_END, END_OF_TEXT)  # where every sample stops by default, whatever the model

ENGINES = Registry("rollout engine")
ENGINES.register_lazy("hf", "kitae.rollout.hf:HFEngine", settings="kitae.rollout.base:InProcessSettings")
ENGINES.register_lazy("server", "kitae.rollout.server:ServerEngine",  # vLLM, SGLang, kitae serve model
                      settings="kitae.rollout.server:ServerSettings")


@dataclass
class EngineSettings(Variant):
    """``sampling.engine``: the rollout engine and its settings, ``hf`` or ``{type: server, servers: [...], ...}``.
    Each engine's settings subclass this beside its code (the server engine's: kitae.rollout.server.ServerSettings)
    and are registered with its ``ENGINES`` entry; an engine registered without settings takes none (``hf``).
    Settings may also be written beside ``engine`` in the sampling section, as configs always did
    (``sampling: {engine: server, servers: [...]}``)."""

    registry: ClassVar[Registry] = ENGINES
    kind: ClassVar[str] = "engine"
    # where it samples, for the memory plan (kitae.trainer.memory_plan): with the trainer's model on the trainer's
    # device (rollout rows there, and the rollout worker's copy with async), or on servers (a device of their own)
    in_process: ClassVar[bool] = False
    on_servers: ClassVar[bool] = False

    def check_sampling(self, sampling: Any, path: str) -> None:
        """Checks of the engine's settings with the sampling section's (``sampling``, a SamplingConfig, at
        ``path``): what ``async`` or ``max_staleness`` cannot run with. None for an engine without settings."""

    def check_model(self, model: Any, path: str) -> None:
        """Checks of the engine's settings with the model section's (``model``, a ModelConfig), when the config is
        read: the weight push a LoRA run needs. None for an engine without settings."""

    def check_push(self, model: Any, path: str) -> None:
        """Checks, when the engine is built, that the policy's weights can be pushed as these settings say
        (``model``: the ModelConfig). None for an engine that pushes none."""



@dataclass
class InProcessSettings(EngineSettings):
    """The in-process engine's (``hf``): none to set; it samples with the trainer's model, in its process."""

    in_process: ClassVar[bool] = True


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
    policy_version: int | None = None  # async rollouts (kitae.rollout.async_runners): the policy version (optimizer
    # steps taken) whose weights sampled it; None where the engine samples with the trainer's current weights
    control_tokens: tuple[str, ...] = TEMPLATE_TOKENS  # the model's (EndMarker.controls): stray inside the content
    # the prompt ended inside a <think> block its chat template opened (kitae.chat.opens_thinking: Qwen3-Thinking-2507,
    # QwQ, the DeepSeek-R1 distills): the text starts inside the thinking, so one without </think> has no answer
    thinking_open: bool = False
    # agents (kitae.rollout.trajectory): per completion token, 1 where the policy sampled it (trained), 0 where the
    # template, the environment or a tool put it in (context only; its log-prob is 0.0); None: every token sampled
    loss_mask: list[int] | None = None
    episode: Episode | None = None  # a multi-turn episode's turns, tool calls and messages; None: one turn

    @property
    def num_tokens(self) -> int:
        return len(self.completion_ids)

    @property
    def sampled_tokens(self) -> int:
        """The completion tokens the policy sampled (all of them, but for an episode's tool results)."""
        return len(self.completion_ids) if self.loss_mask is None else sum(self.loss_mask)


# ---- the engine contract: the core, and one class per optional ability (the module docstring) --------------
@runtime_checkable
class RolloutEngine(Protocol):
    """What every engine does. Built as ``cls(policy, tokenizer)`` unless it is :class:`BuiltFromConfig`. The one
    structural type of the contract: a class with ``generate`` is an engine (subclassing this is optional); what
    it can do beyond that it claims by subclassing the abilities below."""

    def generate(
        self, prompts: list[list[Message]], n: int, sampling: SamplingParams
    ) -> list[list[Completion]]:
        """`n` completions for each prompt (a chat message list), in prompt order."""
        ...


class EncodesPrompts(ABC):
    """It applies the model's chat template itself, with the run's chat settings."""

    @abstractmethod
    def set_chat(self, chat_template_kwargs: dict[str, Any] | None = None, end_marker: str | None = None) -> None:
        """The run's ``model.chat_template_kwargs`` and ``model.end_marker`` (the marker's text)."""

    @abstractmethod
    def encode_prompt(self, messages: list[Message]) -> list[int]:
        """The prompt's token ids, as `generate` samples from them."""


class ContinuesTokens(EncodesPrompts):
    """It samples from token ids and reads them back by the model's end marker."""

    end_marker: EndMarker  # the model's end of turn: where a completion's text ends, what is stray inside it

    @abstractmethod
    def ending(self, sampling: SamplingParams) -> SamplingParams:
        """``sampling`` with its stop strings resolved (``stop`` None: ChatML's and the model's end texts)."""

    @abstractmethod
    def generate_tokens(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams
    ) -> list[list[Completion]]:
        """`generate` from token ids: a prompt, or a prompt followed by the tokens of a trajectory so far."""


class SamplesInWorker(ContinuesTokens):
    """It samples with the trainer's own model in the trainer's process, and the same engine can be built over
    another copy of the policy: ``sampling.async`` runs that copy in a rollout worker process (kitae.rollout.async_runners)
    and pushes the policy's weights to it."""

    model: Any  # the model it samples with (the trainer's policy; in the worker, its copy)

    @abstractmethod
    def on_model(self, model: Any) -> "SamplesInWorker":
        """This engine (its tokenizer, end marker and chat settings) sampling with ``model`` instead; picklable
        with it, so that it goes to the worker process as it is."""


class SyncsWeights(ABC):
    """It samples with its own copy of the weights: the trainer pushes the policy's after optimizer steps (every
    ``sync_every``, and before evaluations) unless the engine holds that version already. The engine
    keeps its version itself; in a multi-process run the main process pushes and every other process's engine
    loads the :meth:`synced_state` the push left."""

    version: int | None  # the policy version (optimizer steps taken) it holds; None before the first push
    sync_every: int = 1  # optimizer steps between pushes (the server engine: its sampling.sync_every)

    @property
    @abstractmethod
    def frozen(self) -> bool:
        """True when it never takes the policy's weights (``sampling.sync: none``): evaluations then sample with
        the policy in the trainer's process."""

    @abstractmethod
    def sync_weights(self, model: Any, version: int, state: dict[str, Any] | None = None) -> dict[str, float] | None:
        """Load ``model``'s weights as policy ``version`` (``state``: its full state dict, gathered under FSDP);
        may return metrics of the push (the server engine: ``sync/bytes``, ``sync/full_bytes``)."""

    @abstractmethod
    def synced_state(self) -> Any:
        """What the last push left (the version, what each replica holds), picklable."""

    @abstractmethod
    def load_synced_state(self, state: Any) -> None:
        """Take another process's :meth:`synced_state`: its push reached the same samplers."""


class RemoteLogprobs(ABC):
    """Its log-probs are not the trainer's (a server's kernels): the trainer recomputes its own as the ratio's old
    log-probs and weighs each token by the two's ratio (truncated importance sampling, ``algorithm.tis_cap``).
    Subclassing it is the whole claim: it has no members."""


class ReportsStats(ABC):
    @abstractmethod
    def take_stats(self) -> dict[str, float]:
        """This step's metrics of the engine (logged with the step's), and a fresh count for the next step."""


class SavesState(ABC):
    """State a checkpoint holds: a resumed run's engine gets back what the stopped run's had at that step."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class ReadsRows(ABC):
    """It samples with each prompt's row (the agent engine: the environment's ``reset(**row)``); sampling and
    grading (kitae.scoring.sample_and_grade.sample_and_grade) calls ``generate_rows`` instead of ``generate``."""

    @abstractmethod
    def generate_rows(self, prompts: list[list[Message]], rows: list[dict[str, Any]], n: int,
                      sampling: SamplingParams) -> list[list[Completion]]:
        """``generate``, with ``rows[i]`` the dataset row of ``prompts[i]``."""


class ChecksServers(ABC):
    """(Of the class.) It samples on servers that pre-flight asks before the model loads."""

    @staticmethod
    @abstractmethod
    def check_servers(sampling: Any) -> dict[str, str | None]:
        """Every server of ``sampling`` (a SamplingConfig) answers: URL -> served model name (None: unsaid)."""


class SamplesImages(ABC):
    """(Of the class.) It has a form that samples the image prompts of a vision-language model (kitae.rollout.vision
    for the in-process engine): a run whose model comes with a processor builds the engine by :meth:`for_images`."""

    @classmethod
    @abstractmethod
    def for_images(cls, model: Any, tokenizer: Any, processor: Any) -> RolloutEngine:
        """The engine over a vision-language ``model`` and its ``processor`` (``model`` None: encodes prompts only)."""


class BuiltFromConfig(ABC):
    """(Of the class.) It is built from the run's sampling settings and what pre-flight found."""

    @classmethod
    @abstractmethod
    def from_config(cls, model: Any, tokenizer: Any, sampling: Any, run_dir: Any,
                    served_models: dict[str, str | None] | None = None) -> RolloutEngine:
        """The engine of ``sampling`` (a SamplingConfig); ``served_models``: :meth:`ChecksServers.check_servers`'s
        answer, when the class has one."""


ABILITIES = (EncodesPrompts, ContinuesTokens, SamplesInWorker, SyncsWeights, RemoteLogprobs, ReportsStats,
             SavesState, ReadsRows, ChecksServers, SamplesImages, BuiltFromConfig)  # every class an engine may claim

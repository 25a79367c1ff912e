"""Two adapters between kitae graders and TRL's reward-function contract.

TRL's contract (``GRPOTrainer(reward_funcs=...)``, TRL's ``_calculate_rewards``)::

    fn(prompts, completions, completion_ids, trainer_state, log_extra, log_metric, **columns)
        -> list[float | None]    # None = abstain

called by keyword, one entry per completion: ``columns`` are the dataset's other columns (all but ``prompt``,
``completion`` and ``completion_ids``), each value repeated for every completion of its prompt; a function may
be ``async`` and usually takes ``**kwargs`` for what it does not read. A prompt that is a message list
(TRL's conversational format) makes every completion a message list, ``[{"role": "assistant", "content":
TEXT}]``; a prompt string (the standard format) gets completion strings. An agent's episode is its messages
after the prompt (assistant turns with ``tool_calls``, ``tool`` results, the final answer last), as TRL's tool loop
passes them, and its ``completion_ids`` every token after the prompt, tool results included.

- :func:`grader_from_callable` wraps such a function as a :class:`Grader` (kitae's trainer uses it so any
  TRL reward function is a reward component), passing the whole contract: completions are the text up to
  the model's end-of-turn marker (``<|im_end|>``, Llama 3's ``<|eot_id|>``, ...: the sample's ``end_marker``)
  with the model's control tokens taken out (a ``<|endoftext|>`` it ended on, a stray ``<|im_start|>``), as TRL,
  which decodes without special tokens, would pass them (:func:`trl_text`); ``completion_ids`` the
  sampled token ids (end token included, as TRL's); ``trainer_state`` a :class:`TrainerState` during
  training and None outside it; ``log_metric``/``log_extra`` record into the grade (see the function);
- :func:`as_reward_function` turns any kitae grader or mix into such a function (so TRL users can adopt
  kitae's graders alone). TRL lays a batch out as consecutive copies of each prompt; consecutive rows with
  the same prompt and columns are graded as one group, so group graders see their group.

TRL decodes completions with ``skip_special_tokens=True``, so the text it passes has lost the end-of-turn
marker (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``, ``</s>``) and any stray template token, and TRL
passes no finish reason. Given the tokenizer, :func:`as_reward_function` rebuilds from ``completion_ids``
(which keep the end token) the sample a kitae rollout would have made: ``output_text`` decoded with special
tokens kept, ``finish_reason`` ("stop" when the ids end with an end id of the model, :func:`kitae.chat.end_marker_of`:
its generation config's ``eos_token_id`` list, its tokenizer's eos token, its turn end, ``<|im_end|>`` when
that is one token; or stop short of ``max_completion_length``; else "length"), the model's ``end_marker`` and
``control_tokens`` (as the rollout sets them, so the template reward cuts at ``<|eot_id|>`` and counts a Llama 3
``<|start_header_id|>`` as a stray token), ``completion_tokens`` (the ids, end token included, as kitae counts
them), ``max_completion_length`` and the training ``step`` (TRL's ``global_step + 1``, kitae's 1-based step).
So template, reward_model, overlong, soft_overlong and length grade a TRL completion exactly as kitae grades the
same completion.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from kitae.chat import IM_END, TEMPLATE_TOKENS, EndMarker, end_marker_of, sample_controls
from kitae.errors import ConfigError
from kitae.graders.base import Grade, Grader, Item, Sample, is_finite_number, run_sync
from kitae.graders.template import output_text

# Keyword arguments TRL adds that are not dataset columns.
TRL_EXTRA_KWARGS = ("trainer_state", "log_extra", "log_metric", "environments")
# Dataset columns TRL does not pass on (the prompt is passed as prompts, the completion is the model's).
TRL_SKIPPED_COLUMNS = ("prompt", "completion", "completion_ids")


@dataclass(frozen=True)
class TrainerState:
    """``trainer_state`` as a reward function sees it in a kitae run: the attributes of transformers'
    ``TrainerState`` that a reward schedule reads, with TRL's meaning.

    ``global_step``: steps finished, so 0 while the first step's completions are graded (kitae's 1-based
    step less 1); ``max_steps``: the run's ``optim.steps``; ``epoch``: passes over the training prompts so far
    (prompts drawn before this step / training rows, a float as TRL's). Outside training (a grader built with
    :func:`grader_from_callable` grading on its own, ``kitae eval``) there is no state: ``trainer_state`` is None.

    >>> TrainerState.of({"step": 3, "max_steps": 10, "epoch": 0.5})
    TrainerState(global_step=2, max_steps=10, epoch=0.5)
    >>> TrainerState.of({"output_text": "a"}) is None
    True
    """

    global_step: int
    max_steps: int
    epoch: float

    @classmethod
    def of(cls, sample: Sample) -> "TrainerState | None":
        """The state of the training step a sample was drawn at (its ``step``, ``max_steps``, ``epoch``)."""
        step = sample.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            return None
        # without them, TrainerState's defaults
        return cls(step - 1, int(sample.get("max_steps", 0)), float(sample.get("epoch", 0.0)))


# ---- TRL reward function -> Grader ----------------------------------------------------------------
class CallableGrader(Grader):
    """A TRL-style reward function as a grader: the group becomes one call with TRL's arguments."""

    type_name = "callable"

    def __init__(self, fn: Callable[..., Any], name: str | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "reward")

    def _kwargs(self, item: Item, samples: list[Sample], log: "_CallLog") -> dict[str, Any]:
        n = len(samples)
        prompt = item.get("prompt", item.get("messages", ""))
        conversational = isinstance(prompt, list)
        texts = [trl_text(s) for s in samples]
        completions = [trl_messages(s, t) for s, t in zip(samples, texts)] if conversational else texts
        columns = {k: [v] * n for k, v in item.items() if k not in TRL_SKIPPED_COLUMNS}
        ids = [s.get("completion_ids") for s in samples]
        return {**columns, "prompts": [prompt] * n, "completions": completions,
                "completion_ids": ids if all(i is not None for i in ids) else None,
                "trainer_state": TrainerState.of(samples[0]) if samples else None,
                "log_extra": log.extra, "log_metric": log.metric}

    def grade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        return run_sync(self.agrade_samples(item, samples))

    async def agrade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        log = _CallLog(len(samples))
        out = self.fn(**self._kwargs(item, samples, log))
        if inspect.isawaitable(out):
            out = await out
        return log.into([_to_grade(value, self.name) for value in list(out)])


def trl_messages(sample: Sample, text: str) -> list[dict[str, Any]]:
    """A conversational completion as TRL passes it: ``[{"role": "assistant", "content": text}]``; for an agent's
    episode (a sample with ``messages``) every message after the prompt, as TRL's tool loop passes them (assistant
    turns with their ``tool_calls``, ``tool`` results), the last assistant turn's content being ``text``."""
    messages = [dict(m) for m in sample.get("messages") or []]
    if not messages:
        return [{"role": "assistant", "content": text}]
    if messages[-1].get("role") == "assistant":
        messages[-1]["content"] = text
    return messages


def trl_text(sample: Sample) -> str:
    """The completion as TRL passes it to a reward function: the content up to the model's end of turn, without
    the model's control tokens anywhere in it (TRL decodes with ``skip_special_tokens=True``; kitae's graders
    see them, so the template rules can catch them)."""
    text = output_text(sample)
    for token in sample_controls(sample):
        text = text.replace(token, "")
    return text


class _CallLog:
    """What one call of a reward function logged: ``log_metric(name, value)`` becomes the sub-score ``name``
    of every sample of the call (a group's value; the mean when logged twice), ``log_extra(column, values)``
    (one value per sample) the sub-score ``column`` where a value is a number, else ``column: value`` in the
    sample's reason. The run store keeps both with the component's grade."""

    def __init__(self, n: int):
        self.n = n
        self.metrics: dict[str, list[float]] = {}
        self.columns: dict[str, list[Any]] = {}

    def metric(self, name: str, value: float) -> None:
        if is_finite_number(value):
            self.metrics.setdefault(str(name), []).append(float(value))

    def extra(self, column: str, values: list) -> None:
        self.columns[str(column)] = list(values)

    def into(self, grades: list[Grade]) -> list[Grade]:
        for name, values in self.metrics.items():
            for g in grades:
                g.sub_scores[name] = sum(values) / len(values)
        for column, values in self.columns.items():
            for g, value in zip(grades, values):
                if is_finite_number(value):
                    g.sub_scores[column] = float(value)
                elif value is not None and value != "":
                    g.reason = "; ".join(filter(None, [g.reason, f"{column}: {value}"]))
        return grades


def _to_grade(value: Any, name: str) -> Grade:
    if value is None:
        return Grade(score=None)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return Grade.abstain(error=f"reward function {name} returned {value!r}, not a number")
    if not math.isfinite(value):  # TRL writes None as NaN inside its trainer; a function should return None
        return Grade.abstain(error=f"reward function {name} returned {float(value)!r}, not a finite number")
    return Grade(score=float(value))


def grader_from_callable(fn: Callable[..., Any], name: str | None = None) -> Grader:
    """Wrap a TRL reward function ``fn(prompts, completions, completion_ids, trainer_state, log_extra,
    log_metric, **columns) -> list[float|None]`` (sync or async), called as TRL calls it (module docstring).

    The item's ``prompt`` (or ``messages``) is the prompt; its other fields are passed as columns. A
    conversational prompt (a message list) gets conversational completions, as TRL does. ``completion_ids``
    are the samples' token ids (None when a sample has none: graded from text alone); ``trainer_state`` is a
    :class:`TrainerState` when the samples carry their training ``step`` (kitae's trainer), else None. None
    abstains; a value that is not a number, or is NaN or ±infinity, abstains with an error saying so (counted).
    """
    return CallableGrader(fn, name)


# ---- Grader -> TRL reward function ----------------------------------------------------------------
def as_reward_function(grader: Grader, name: str | None = None, asynchronous: bool = False, *,
                       tokenizer: Any = None, max_completion_length: int | None = None,
                       end_marker: str | None = None) -> Callable[..., Any]:
    """A TRL reward function that grades with ``grader``; abstentions are None (TRL masks them).

    Pass ``tokenizer`` (the trainer's ``processing_class``) and ``max_completion_length`` (``args``' value):
    with them each completion is graded as kitae's own rollout would present it (the model's end marker, found
    from the tokenizer, its chat template and the generation config beside it; finish reason; token count; see
    the module docstring). ``end_marker``: the turn end's text when the tokenizer's is not the one (as
    ``model.end_marker`` in a kitae run). Without a tokenizer the graders see TRL's text, which has no end
    marker: template, reward_model (its template gate) and the length rules then misjudge every completion, so
    a warning says so the first time TRL passes ``completion_ids``.

    When TRL passes ``log_metric``, each sub-score's batch mean is logged as ``{name}/{sub}``; with
    ``log_extra``, the per-sample reason (or error) becomes a column ``{name}_reason`` of the completions table.
    """
    label = name or grader.name or grader.type_name
    restore = _SampleBuilder(tokenizer, max_completion_length, label, end_marker)

    async def reward(prompts: list, completions: list, completion_ids: list | None = None, **kwargs: Any):
        columns = {k: v for k, v in kwargs.items() if k not in TRL_EXTRA_KWARGS}
        groups = _groups(prompts, completions, completion_ids, columns, restore, kwargs.get("trainer_state"))
        results = await asyncio.gather(*(grader.agrade_group(item, samples) for item, samples in groups))
        grades = [g for group in results for g in group]
        _log(label, grades, kwargs)
        return [g.score for g in grades]

    if asynchronous:
        reward.__name__ = reward.__qualname__ = label
        return reward

    def reward_sync(prompts: list, completions: list, completion_ids: list | None = None, **kwargs: Any):
        return run_sync(reward(prompts, completions, completion_ids, **kwargs))

    reward_sync.__name__ = reward_sync.__qualname__ = label
    return reward_sync


class _SampleBuilder:
    """One TRL completion -> the sample kitae's rollout would have made of it."""

    def __init__(self, tokenizer: Any, max_completion_length: int | None, label: str, end_marker: str | None = None):
        bad = isinstance(max_completion_length, bool) or not isinstance(max_completion_length, int)
        if max_completion_length is not None and (bad or max_completion_length < 1):
            raise ConfigError("as_reward_function.max_completion_length", "expected a positive integer (GRPOConfig's "
                              f"max_completion_length), got {max_completion_length!r}")
        self.tokenizer, self.max_len, self.label = tokenizer, max_completion_length, label
        self.end = end_marker_of(tokenizer, override=end_marker) if tokenizer is not None else None
        self.end_ids = _end_ids(tokenizer, self.end) if self.end is not None else set()
        self.warned = False

    def __call__(self, completion: Any, ids: list[int] | None, step: int | None) -> Sample:
        sample: Sample = {"output_text": _completion_text(completion)}
        if self.max_len is not None:
            sample["max_completion_length"] = self.max_len
        if step is not None:
            sample["step"] = step
        if ids is None:
            return sample
        ids = [int(i) for i in ids]
        sample["completion_ids"] = ids
        sample["completion_tokens"] = len(ids)
        if self.tokenizer is None:
            self._warn_once()
            return sample
        # TRL ends a completion at its first end-of-sequence token or at max_completion_length.
        stopped = bool(ids) and ids[-1] in self.end_ids
        if self.max_len is not None and len(ids) < self.max_len:
            stopped = True  # an end token of the model's generation config that the tokenizer does not name
        sample["finish_reason"] = "stop" if stopped else "length"
        sample["output_text"] = self._text(completion, ids, stopped)
        if self.end.text != IM_END:  # as the rollout's samples carry them (kitae.scoring.sample_and_grade.sample_dict)
            sample["end_marker"] = self.end.text
        if self.end.controls != TEMPLATE_TOKENS:
            sample["control_tokens"] = self.end.controls
        return sample

    def _text(self, completion: Any, ids: list[int], stopped: bool) -> str:
        if _is_single_turn(completion):
            return self.tokenizer.decode(ids, skip_special_tokens=False)
        # A tool loop: the ids also hold the tool results; keep TRL's text and put back the end token.
        end = self.tokenizer.decode(ids[-1:], skip_special_tokens=False) if stopped and ids[-1] in self.end_ids else ""
        return _completion_text(completion) + end

    def _warn_once(self) -> None:
        if not self.warned:
            self.warned = True
            warnings.warn(
                f"reward function {self.label!r}: TRL passed completion_ids but as_reward_function got no tokenizer, "
                "so completions lack their end-of-turn marker (<|im_end|>, <|eot_id|>, ...) and finish reason; "
                "template, reward_model and the length rules misjudge them. Pass tokenizer=<the trainer's "
                "processing_class> and max_completion_length.",
                stacklevel=3,
            )


def _end_ids(tokenizer: Any, end: EndMarker) -> set[int]:
    """The ids TRL stops at: every end id of the model (its generation config's, its tokenizer's eos, its turn
    end's) and, when it is one token, ``<|im_end|>``'s."""
    ids = set(end.ids)
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return ids


def _is_single_turn(completion: Any) -> bool:
    return not isinstance(completion, list) or len(completion) <= 1


def _trl_step(trainer_state: Any) -> int | None:
    """kitae's 1-based step of the step TRL is generating for (TRL's global_step counts finished steps)."""
    step = getattr(trainer_state, "global_step", None)
    return step + 1 if isinstance(step, int) and not isinstance(step, bool) else None


def _groups(prompts: list, completions: list, completion_ids: list | None, columns: dict[str, list],
            restore: _SampleBuilder, trainer_state: Any = None) -> list[tuple[Item, list[Sample]]]:
    groups: list[tuple[Item, list[Sample]]] = []
    step = _trl_step(trainer_state)
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        item: Item = {k: v[i] for k, v in columns.items()}
        item["prompt"] = prompt
        if isinstance(prompt, list):
            item.setdefault("messages", prompt)
        sample = restore(completion, None if completion_ids is None else completion_ids[i], step)
        if groups and groups[-1][0] == item:
            groups[-1][1].append(sample)
        else:
            groups.append((item, [sample]))
    return groups


def _completion_text(completion: Any) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}, ...]
        return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))
    return str(completion)


def _log(label: str, grades: list[Grade], kwargs: dict[str, Any]) -> None:
    log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
    if callable(log_metric):
        names = {k for g in grades for k in g.sub_scores}
        for sub in sorted(names):
            values = [g.sub_scores[sub] for g in grades if g.sub_scores.get(sub) is not None]
            if values:
                log_metric(f"{label}/{sub}", sum(values) / len(values))
    if callable(log_extra):
        log_extra(f"{label}_reason", [g.error or g.reason or "" for g in grades])

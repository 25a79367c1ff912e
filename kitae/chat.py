"""Chat formatting and the model's end-of-turn marker.

The GRPO-zero recipe's inference code: format the conversation as ChatML, generate, and stop at ``<|im_end|>``, which may be
several tokens for a tokenizer that does not know it as a special token. Prompts use the tokenizer's own
``chat_template`` when it has one (its options, such as Qwen3's ``enable_thinking``, as ``chat_template_kwargs``)
and ChatML otherwise.

Other families end a turn otherwise (Llama 3 ``<|eot_id|>``, Gemma ``<end_of_turn>``, Mistral ``</s>``, Phi-3
``<|end|>``): :func:`end_marker_of` finds the model's :class:`EndMarker` from its tokenizer, chat template and
generation config, once, where the engine gets the tokenizer. The engine stops at every one of its ids and texts;
completions carry its text to the graders (``sample["end_marker"]``, :func:`sample_end`), so the template reward,
repetition, diversity and the reward model's gate cut the content at the model's own marker. Its ``controls``
(:func:`control_tokens`: the tokenizer's special tokens, such as Llama 3's ``<|start_header_id|>``) are the
tokens that break the template when written inside an answer (``sample["control_tokens"]``,
:func:`sample_controls`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
TEMPLATE_TOKENS = (IM_START, IM_END, END_OF_TEXT)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"  # a reasoning model's thinking block

# The same template is written into the bundled tokenizer's config.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

Message = dict[str, Any]  # {"role", "content"}; content is a string, or text and image parts (kitae.data.loader)
IMAGE_MARK = "[image]"


def to_messages(prompt: str | list[Message], system: str | None = None) -> list[Message]:
    """A user string or a message list, with an optional system message in front."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if system and not (messages and messages[0].get("role") == "system"):
        messages = [{"role": "system", "content": system}] + messages
    return messages


def content_text(content: Any, image: str | Callable[[dict], str] = IMAGE_MARK) -> str:
    """A turn's content as text: a string as is; parts joined, each image part shown as `image` (a string, or
    a function of the part).

    >>> content_text([{"type": "image", "image": "/data/a.png"}, {"type": "text", "text": "How many?"}])
    '[image]How many?'
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    mark = image if callable(image) else (lambda part: image)
    return "".join(p.get("text", "") if p.get("type") == "text" else mark(p) for p in content if isinstance(p, dict))


def prompt_of(item: dict[str, Any], roles: tuple[str, ...] = ("user", "system")) -> str:
    """The prompt the model was given: the row's turns of `roles` (user and system), joined by newlines, or a
    TRL-style string ``prompt``; "" when there is none."""
    messages = item.get("messages", item.get("prompt"))
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        return ""
    return "\n".join(content_text(m.get("content")) for m in messages
                     if isinstance(m, dict) and m.get("role") in roles)


def has_images(messages: list[Message]) -> bool:
    return any(isinstance(m.get("content"), list) and any(p.get("type") == "image" for p in m["content"])
               for m in messages)


def chatml(messages: list[Message], add_generation_prompt: bool = True) -> str:
    """ChatML text, as in the GRPO-zero recipe: ``<|im_start|>role\\ncontent<|im_end|>\\n`` per turn."""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def format_prompt(tokenizer: Any, messages: list[Message], chat_template_kwargs: dict[str, Any] | None = None) -> str:
    """The prompt text for generation: the tokenizer's chat template if it has one (``chat_template_kwargs`` are
    its variables, e.g. ``{"enable_thinking": False}`` for Qwen3), else ChatML."""
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             **(chat_template_kwargs or {}))
    return chatml(messages)


def opens_thinking(prompt: str) -> bool:
    """Whether a rendered generation prompt ends inside a ``<think>`` block: the chat template opened it for the
    model (Qwen3-4B-Thinking-2507, QwQ and the DeepSeek-R1 distills end it with ``<think>\\n``), so the
    completion starts inside the thinking and holds ``...</think>answer`` with no opening tag. Qwen3's hybrid
    template does not (thinking on, the model opens the block itself; off, it renders an empty closed one).

    >>> opens_thinking("<|im_start|>assistant\\n<think>\\n"), opens_thinking("<|im_start|>assistant\\n")
    (True, False)
    """
    return prompt.rstrip().endswith(THINK_OPEN)


def prompt_opens_thinking(tokenizer: Any, prompt_ids: list[int]) -> bool:
    """:func:`opens_thinking` of a tokenized prompt (its last few tokens decoded)."""
    if tokenizer is None or not prompt_ids:
        return False
    return opens_thinking(tokenizer.decode(list(prompt_ids[-8:]), skip_special_tokens=False))


def split_at_end(text: str, end: str = IM_END) -> tuple[str, bool]:
    """(content before the first end marker, whether the marker was there)."""
    head, sep, _ = text.partition(end)
    return head, bool(sep)


def is_template_compliant(text: str, finish_reason: str | None = None, end: str = IM_END,
                          controls: tuple[str, ...] = TEMPLATE_TOKENS) -> bool:
    """The GRPO-zero recipe's notion of following the chat template.

    A completion complies when it ends its turn with the end marker (nothing but whitespace after it),
    has no other template token (``controls``, the model's: :func:`sample_controls`) inside its content, was
    not cut at the length limit, and is not empty.
    """
    if finish_reason == "length":
        return False
    content, ended = split_at_end(text, end)
    if not ended or text.rstrip().removesuffix(end).rstrip() != content.rstrip():
        return False
    if any(tok in content for tok in controls):
        return False
    return bool(content.strip())


# ---- the model's end of turn ------------------------------------------------------------------------------
@dataclass(frozen=True)
class EndMarker:
    """How a model ends its turn.

    ``text`` closes an assistant turn in its chat template: the graders' end marker. ``ids`` are every token id
    that ends generation (the generation config's ``eos_token_id``, one or a list, the tokenizer's end-of-sequence
    token, and ``text``'s id when it is one token); ``texts`` those ids' texts, in the same order; ``controls``
    the model's control tokens (:func:`control_tokens`), stray inside an answer. ChatML's, the default, is the
    bundled model's.
    """

    text: str = IM_END
    ids: tuple[int, ...] = ()
    texts: tuple[str, ...] = ()
    controls: tuple[str, ...] = TEMPLATE_TOKENS

    @property
    def stops(self) -> tuple[str, ...]:
        """The texts generation stops at: ``text`` first, then the end ids' texts."""
        return tuple(dict.fromkeys(t for t in (self.text, *self.texts) if t))


CHATML_END = EndMarker()
_PROBE = "kitae-end-probe"


def end_marker_of(tokenizer: Any, override: str | None = None, eos_ids: Any = None) -> EndMarker:
    """The model's :class:`EndMarker`: ``override`` when given, else the text the chat template puts after an
    assistant turn, else the tokenizer's end-of-sequence token, else ``<|im_end|>`` (no chat template: ChatML).

    ``eos_ids``: the generation config's ``eos_token_id`` (an int or a list); by default read from
    generation_config.json beside the tokenizer.
    """
    if tokenizer is None:
        return CHATML_END
    text = override or template_end(tokenizer) or (None if getattr(tokenizer, "chat_template", None) else IM_END)
    text = text or getattr(tokenizer, "eos_token", None) or IM_END
    ids = _id_list(eos_ids if eos_ids is not None else _generation_eos(tokenizer))
    ids += _id_list(getattr(tokenizer, "eos_token_id", None))
    own = _single_token_id(tokenizer, text)
    ids += [] if own is None else [own]
    ids = list(dict.fromkeys(ids))
    texts = tuple(tokenizer.decode([i], skip_special_tokens=False) for i in ids)
    return EndMarker(text, tuple(ids), texts, control_tokens(tokenizer, (text, *texts)))


def control_tokens(tokenizer: Any, ends: tuple[str, ...] = (IM_END,)) -> tuple[str, ...]:
    """The texts of a model's control tokens: ChatML's markers for a model that ends its turn with ``<|im_end|>``
    (``ends[0]``), then ``ends`` (its end texts) and the tokenizer's special tokens (the ones
    ``decode(skip_special_tokens=True)`` drops: the named ones and every added token marked special, as Meta's
    Llama 3 tokenizer marks ``<|start_header_id|>`` without naming it; Gemma's ``<start_of_turn>``, Mistral's
    ``[INST]``). Added tokens that are text (Qwen3's ``<think>``, not special) are not among them.

    >>> control_tokens(None)
    ('<|im_start|>', '<|im_end|>', '<|endoftext|>')
    """
    special = list(getattr(tokenizer, "all_special_tokens", None) or [])
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    special += [getattr(t, "content", None) for _, t in sorted(added.items()) if getattr(t, "special", False)]
    chatml = TEMPLATE_TOKENS if ends and ends[0] == IM_END else ()
    return tuple(dict.fromkeys(t for t in (*chatml, *ends, *special) if isinstance(t, str) and t))


def template_end(tokenizer: Any) -> str | None:
    """What the tokenizer's chat template writes right after an assistant turn's content (whitespace skipped):
    the longest added token there (``<|eot_id|>``, ``<end_of_turn>``, ``</s>``), else the text up to the next
    whitespace (a ChatML ``<|im_end|>`` the tokenizer splits); None without a template or when it writes nothing."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}]
    try:
        text = tokenizer.apply_chat_template(turns, tokenize=False)
    except Exception:  # a template that refuses the probe conversation: no marker from it
        return None
    if not isinstance(text, str) or _PROBE not in text:
        return None
    tail = text.split(_PROBE, 1)[1].lstrip()
    added = sorted(getattr(tokenizer, "get_added_vocab", dict)(), key=len, reverse=True)
    for token in added:
        if token and tail.startswith(token):
            return token
    first = re.match(r"\S+", tail)
    return first.group(0) if first else None


def sample_end(sample: dict, configured: str | None = None) -> str:
    """The end marker a grader cuts a sample at: its spec's ``end_marker`` when set, else the one of the model
    that wrote the sample (``sample["end_marker"]``, set by the rollout), else ``<|im_end|>``."""
    return configured or sample.get("end_marker") or IM_END


def sample_controls(sample: dict, configured: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The tokens that break the template inside a sample's content: its spec's ``stray_tokens`` when set, else
    the control tokens of the model that wrote it (``sample["control_tokens"]``, set by the rollout), else
    ChatML's."""
    if configured is not None:
        return tuple(configured)
    return tuple(sample.get("control_tokens") or TEMPLATE_TOKENS)


def _generation_eos(tokenizer: Any) -> Any:
    """``eos_token_id`` of generation_config.json in the tokenizer's folder, when there is one."""
    path = Path(str(getattr(tokenizer, "name_or_path", "") or "")) / "generation_config.json"
    try:
        return json.loads(path.read_text()).get("eos_token_id") if path.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None


def _id_list(ids: Any) -> list[int]:
    items = ids if isinstance(ids, (list, tuple)) else [ids]
    return [int(i) for i in items if isinstance(i, int) and not isinstance(i, bool) and i >= 0]


def _single_token_id(tokenizer: Any, text: str) -> int | None:
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except Exception:
        return None
    return ids[0] if len(ids) == 1 else None

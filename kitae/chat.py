"""Chat formatting (ChatML) and the end-of-turn marker.

The GRPO-zero recipe's inference code: format the conversation as ChatML, generate, and stop at ``<|im_end|>``, which may be
several tokens for a tokenizer that does not know it as a special token. Prompts use the tokenizer's own
``chat_template`` when it has one and ChatML otherwise.
"""

from __future__ import annotations

from typing import Any, Callable

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
TEMPLATE_TOKENS = (IM_START, IM_END, END_OF_TEXT)

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


def has_images(messages: list[Message]) -> bool:
    return any(isinstance(m.get("content"), list) and any(p.get("type") == "image" for p in m["content"])
               for m in messages)


def chatml(messages: list[Message], add_generation_prompt: bool = True) -> str:
    """ChatML text, as in the GRPO-zero recipe: ``<|im_start|>role\\ncontent<|im_end|>\\n`` per turn."""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def format_prompt(tokenizer: Any, messages: list[Message]) -> str:
    """The prompt text for generation: the tokenizer's chat template if it has one, else ChatML."""
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return chatml(messages)


def split_at_end(text: str, end: str = IM_END) -> tuple[str, bool]:
    """(content before the first end marker, whether the marker was there)."""
    head, sep, _ = text.partition(end)
    return head, bool(sep)


def is_template_compliant(text: str, finish_reason: str | None = None, end: str = IM_END) -> bool:
    """The GRPO-zero recipe's notion of following the chat template.

    A completion complies when it ends its turn with the end marker (nothing but whitespace after it),
    has no other template token inside its content, was not cut at the length limit, and is not empty.
    """
    if finish_reason == "length":
        return False
    content, ended = split_at_end(text, end)
    if not ended or text.rstrip().removesuffix(end).rstrip() != content.rstrip():
        return False
    if any(tok in content for tok in TEMPLATE_TOKENS):
        return False
    return bool(content.strip())

"""A local reward model: a transformers ``AutoModelForSequenceClassification`` that gives one scalar per conversation.

The GRPO-zero recipe scored answers with cyberagent/ca-reward-3b-ja (a LlamaForSequenceClassification): apply the RM
tokenizer's chat template to the user and assistant turns, run the classifier, take the scalar logit. kitae does
the same, batched:

- the text is ``tokenizer.apply_chat_template(messages, tokenize=False)`` when the tokenizer has a chat template,
  ChatML (kitae.chat.chatml) otherwise, and is tokenized without adding special tokens again;
- the score is ``logits[:, label_index]`` (the raw logit: no sigmoid), read at the last non-padding token, as the
  model's own forward does (so ``pad_token_id`` must be set; it falls back to the EOS token);
- conversations longer than ``max_length`` tokens are cut from the left, keeping the answer's end, which is
  where a last-token reward model looks.

``conversation_for_rm`` builds the conversation from a dataset item and a completion (the recipe's "user and
assistant turns": system messages are dropped unless asked for).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kitae.chat import chatml, content_text

Message = dict[str, str]

BUNDLED_RM_NAME = "kitae-tiny-rm"


def bundled_rm_path() -> Path:
    """Where the bundled tiny reward model ships (built by scripts/build_reward_model.py)."""
    from kitae.models import BUNDLED_RM

    return BUNDLED_RM


def resolve_rm_path(path: str | Path) -> str:
    """"bundled" / "kitae-tiny-rm" -> the bundled reward model; anything else as given."""
    return str(bundled_rm_path()) if str(path) in ("bundled", BUNDLED_RM_NAME) else str(path)


def conversation_for_rm(item: dict[str, Any], answer: str, include_system: bool = False) -> list[Message]:
    """The item's user/assistant turns (and system turns when asked) followed by the answer as the assistant."""
    messages = item.get("messages")
    if not isinstance(messages, list):
        raise ValueError("item has no 'messages' list to show the reward model")
    roles = ("system", "user", "assistant") if include_system else ("user", "assistant")
    # a text reward model reads an image prompt's text, each image shown as [image]
    turns = [{"role": m["role"], "content": content_text(m["content"])} for m in messages if m.get("role") in roles]
    return turns + [{"role": "assistant", "content": answer}]


def format_conversation(tokenizer: Any, messages: list[Message]) -> str:
    """The text a reward model reads: its own chat template when it has one, else ChatML."""
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    return chatml(messages, add_generation_prompt=False)


def _quantized(quantization: Any, dtype: str, device: str) -> dict[str, Any]:
    """from_pretrained's arguments for a reward model in 4 or 8 bits (kitae.quantization); its score head stays
    in `dtype` (one output per class: nothing to save, and its precision is the reward's)."""
    if quantization is None:
        return {}
    from kitae.quantization import bitsandbytes_config

    config = bitsandbytes_config(quantization, dtype, device, "--quantize", skip=["score", "classifier"])
    return {"quantization_config": config, "device_map": {"": str(device)}}


class LocalRewardModel:
    """Scores conversations (or already formatted texts) with a sequence classifier on one device.

    Thread-safe: one forward pass at a time (the server calls it from several request threads).
    """

    def __init__(self, path: str | Path, batch_size: int = 8, max_length: int = 2048, device: str = "cpu",
                 dtype: str = "float32", label_index: int = 0, quantization: Any = None):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from kitae.models import model_folder

        self.path = model_folder(resolve_rm_path(path))  # a local folder or a Hub id (kitae.hub)
        self.batch_size, self.max_length, self.label_index = batch_size, max_length, label_index
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.tokenizer.truncation_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        self.model = AutoModelForSequenceClassification.from_pretrained(
            self.path, dtype=torch_dtype, **_quantized(quantization, dtype, device))
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        (self.model if quantization is not None else self.model.to(device)).eval()
        self.device = device
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        from kitae.models import model_name

        return model_name(self.path)

    def format(self, messages: list[Message]) -> str:
        return format_conversation(self.tokenizer, messages)

    def score(self, conversations: list[list[Message]]) -> list[float]:
        """One scalar per conversation."""
        return self.score_texts([self.format(c) for c in conversations])

    def score_texts(self, texts: list[str]) -> list[float]:
        """One scalar per formatted text, in batches of batch_size."""
        out: list[float] = []
        with self._lock:
            for start in range(0, len(texts), self.batch_size):
                out += self._forward(texts[start : start + self.batch_size])
        return out

    def _forward(self, texts: list[str]) -> list[float]:
        import torch

        enc = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                             max_length=self.max_length, add_special_tokens=False)
        enc = {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        with torch.inference_mode():
            logits = self.model(**enc).logits  # [batch, num_labels]
        return logits[:, self.label_index].float().tolist()  # [batch]

"""The transformers rollout engine for vision-language models: image prompts, the same decoding loop.

A prompt whose turns hold image parts (``{"type": "image", "image": REF}``, kitae.data.loader) goes through the
model's processor: the chat template puts the model's image placeholder where each image is, and the
processor expands it to the model's image tokens and makes the image tensors (``pixel_values``, and whatever
else the model reads with them, such as ``image_sizes``). The prompt's token ids and those tensors then go
through :class:`kitae.rollout.hf.HFEngine`'s loop: the images are read once, at prefill, into the KV cache;
each sample's tokens and log-probs follow as for text. Every Completion keeps its prompt's image tensors
(``image_inputs``) so the policy update recomputes the log-probs with the same images.

A prompt without images goes through the processor's tokenizer alone, as the text engine would encode it.
"""

from __future__ import annotations

from typing import Any

import torch

from kitae.chat import Message, has_images
from kitae.data.images import open_image
from kitae.models import is_vision_model, load_causal_lm, load_processor
from kitae.rollout.base import Completion, SamplingParams
from kitae.rollout.hf import HFEngine


PER_TOKEN = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")


class VisionEngine(HFEngine):
    """Rollout engine over a transformers vision-language model and its processor."""

    def __init__(self, model: Any, tokenizer: Any, processor: Any, max_batch_size: int = 128):
        super().__init__(model, tokenizer if tokenizer is not None else processor.tokenizer, max_batch_size)
        self.processor = processor

    @classmethod
    def from_pretrained(cls, path: str | None, dtype: str = "float32", device: str = "cpu", **kw) -> "VisionEngine":
        processor = load_processor(path)
        return cls(load_causal_lm(path, dtype, device), processor.tokenizer, processor, **kw)

    def generate(self, prompts: list[list[Message]], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        encoded = [self.encode(m) for m in prompts]
        return self.generate_tokens([ids for ids, _ in encoded], n, sampling, [images for _, images in encoded])

    def encode_prompt(self, messages: list[Message]) -> list[int]:
        """The prompt's token ids, image tokens included (what counts against the model's context)."""
        return self.encode(messages)[0]

    def encode(self, messages: list[Message]) -> tuple[list[int], dict[str, torch.Tensor] | None]:
        """(prompt token ids, the prompt's image tensors or None when it has no image)."""
        text = self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                  **self.chat_template_kwargs)
        if not has_images(messages):
            return self.tokenizer(text, add_special_tokens=False)["input_ids"], None
        images = [open_image(p["image"]) for m in messages if isinstance(m["content"], list)
                  for p in m["content"] if p.get("type") == "image"]
        enc = self.processor(text=[text], images=images, return_tensors="pt", add_special_tokens=False)
        ids = enc["input_ids"][0].tolist()
        # per-image tensors only (dim 0 = images or patches); per-token ones would not follow the rows' padding
        return ids, {k: v for k, v in enc.items() if isinstance(v, torch.Tensor) and k not in PER_TOKEN}


def load_engine(path: str | None, dtype: str = "float32", device: str = "cpu") -> HFEngine:
    """The in-process engine (``hf`` in kitae.rollout.base.ENGINES) for the model folder at `path`: its image form
    (SamplesImages: a VisionEngine) for a vision-language model (its config has a ``vision_config``)."""
    from kitae.rollout.base import ENGINES

    cls = ENGINES.get("hf")
    if is_vision_model(path):
        processor = load_processor(path)
        return cls.for_images(load_causal_lm(path, dtype, device), processor.tokenizer, processor)
    return cls.from_pretrained(path, dtype=dtype, device=device)

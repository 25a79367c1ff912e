"""Tiny random-weight models of the families users bring, each with its family's chat format and end of turn.

Each :class:`Family` builds, from its transformers config class, a 2-layer model (hidden 32) and a byte-level BPE
tokenizer trained here on a few lines, with the family's special tokens at the start of the vocabulary, its real
chat template (Jinja, as the model's tokenizer_config.json ships it; tool-calling branches left out), its
end-of-sequence token and its generation config's ``eos_token_id`` list. The vocabularies are not the real ones
(see docs/families.md: the real Llama 3 and Qwen vocabularies are in tests/families/test_real_vocab.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast

QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\") %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

QWEN3_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}"
    "{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.content is string %}{%- set content = message.content %}{%- else %}{%- set content = '' %}{%- endif %}"
    "{%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == \"assistant\" %}"
    "{%- set reasoning_content = '' %}"
    "{%- if message.reasoning_content is string %}{%- set reasoning_content = message.reasoning_content %}"
    "{%- else %}{%- if '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index %}"
    "{%- if loop.last or (not loop.last and reasoning_content) %}"
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

GEMMA2_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)

GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- else -%}{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = \"\" -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- elif message['content'] is iterable -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}{%- else -%}{{ raise_exception(\"Invalid content type\") }}{%- endif -%}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{'<start_of_turn>model\\n'}}{%- endif -%}"
)

MISTRAL_TEMPLATE = (  # Mistral-7B-Instruct-v0.3's, without its tool branches
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- bos_token }}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if loop.last and system_message is defined %}{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content']|trim + eos_token}}"
    "{%- else %}{{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}"
    "{%- endif %}"
    "{%- endfor %}"
)

PHI3_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)

CORPUS = [
    "hello world, the answer is 47. what is 12+35? こんにちは、世界。東京は日本の首都です。",
    "You are a helpful assistant. user assistant model system think",
] * 20


@dataclass(frozen=True)
class Family:
    """One family: its config class's name and settings, special tokens, end of turn and chat template."""

    name: str
    config_class: str
    specials: tuple[str, ...]  # in vocabulary order, ids 0.. (a real vocabulary has them elsewhere; ids differ)
    eos: str  # the tokenizer's eos_token
    eos_ids: tuple[str, ...]  # generation_config.json's eos_token_id, as tokens
    end: str  # what closes an assistant turn in the chat template
    template: str
    bos: str | None = None
    pad: str | None = None
    lora_attention: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    system_turn: bool = True  # the template accepts a system turn
    plain: tuple[str, ...] = ()  # of `specials`, the added tokens that are not special (Qwen3's <think>: text)
    config: dict[str, Any] = field(default_factory=dict)

    def tokenizer(self) -> PreTrainedTokenizerFast:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      special_tokens=[s for s in self.specials if s not in self.plain])
        tok.train_from_iterator(CORPUS, trainer)
        named = {"eos_token": self.eos, "bos_token": self.bos, "pad_token": self.pad}
        out = PreTrainedTokenizerFast(tokenizer_object=tok, **{k: v for k, v in named.items() if v})
        named_values = {v for v in named.values() if v}
        out.add_special_tokens({"additional_special_tokens": [s for s in self.specials
                                                              if s not in named_values and s not in self.plain]})
        out.add_tokens([AddedToken(t, special=False, normalized=False) for t in self.plain])
        out.chat_template = self.template
        return out

    def model(self, tokenizer: Any, seed: int = 0):
        import transformers

        torch.manual_seed(seed)
        cls = getattr(transformers, self.config_class)
        ids = {"bos_token_id": tokenizer.convert_tokens_to_ids(self.bos) if self.bos else None,
               "eos_token_id": [tokenizer.convert_tokens_to_ids(t) for t in self.eos_ids],
               "pad_token_id": tokenizer.convert_tokens_to_ids(self.pad) if self.pad else None}
        cfg = cls(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **ids, **self.config)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        model.generation_config = GenerationConfig(**ids)
        return model

    def save(self, folder: Path, seed: int = 0) -> Path:
        """The tiny model and its tokenizer in `folder` (config.json, generation_config.json, weights)."""
        tok = self.tokenizer()
        self.model(tok, seed).save_pretrained(folder)
        tok.save_pretrained(folder)
        return folder


FAMILIES = [
    Family("qwen2.5", "Qwen2Config", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), eos="<|im_end|>",
           eos_ids=("<|im_end|>", "<|endoftext|>"), end="<|im_end|>", template=QWEN25_TEMPLATE, pad="<|endoftext|>",
           config={"tie_word_embeddings": True}),
    Family("qwen3", "Qwen3Config", ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"),
           eos="<|im_end|>", eos_ids=("<|im_end|>", "<|endoftext|>"), end="<|im_end|>", template=QWEN3_TEMPLATE,
           pad="<|endoftext|>", plain=("<think>", "</think>"), config={"head_dim": 8, "tie_word_embeddings": True}),
    Family("llama3", "LlamaConfig", ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                     "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>"),
           eos="<|eot_id|>", eos_ids=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"), end="<|eot_id|>",
           template=LLAMA3_TEMPLATE, bos="<|begin_of_text|>", config={"tie_word_embeddings": True}),
    Family("gemma2", "Gemma2Config", ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"), eos="<eos>",
           eos_ids=("<eos>", "<end_of_turn>"), end="<end_of_turn>", template=GEMMA2_TEMPLATE, bos="<bos>",
           pad="<pad>", system_turn=False,
           config={"head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": 16}),
    Family("gemma3", "Gemma3TextConfig", ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"),
           eos="<eos>", eos_ids=("<eos>", "<end_of_turn>"), end="<end_of_turn>", template=GEMMA3_TEMPLATE,
           bos="<bos>", pad="<pad>", config={"head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": 16}),
    Family("mistral", "MistralConfig", ("<unk>", "<s>", "</s>", "[INST]", "[/INST]"), eos="</s>", eos_ids=("</s>",),
           end="</s>", template=MISTRAL_TEMPLATE, bos="<s>", config={"head_dim": 8, "tie_word_embeddings": True}),
    Family("phi3", "Phi3Config", ("<unk>", "<s>", "</s>", "<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>",
                                  "<|user|>"),
           eos="<|endoftext|>", eos_ids=("<|endoftext|>", "<|assistant|>", "<|end|>"), end="<|end|>",
           template=PHI3_TEMPLATE, bos="<s>", pad="<|endoftext|>", lora_attention=("qkv_proj", "o_proj"),
           config={"tie_word_embeddings": True}),
]
BY_NAME = {f.name: f for f in FAMILIES}

TEMPLATES = Path(__file__).parent / "templates"  # real chat templates, whole, as the models' tokenizer_config.json


def real_template(name: str) -> str:
    """A model's own chat template from tests/families/templates (``Qwen-Qwen3-4B-Thinking-2507``, ...)."""
    return (TEMPLATES / f"{name}.jinja").read_text()


# Qwen3 with its real templates: the 2507 thinking model's generation prompt opens <think> for it; the hybrid's
# renders an empty closed block with enable_thinking false. Not in FAMILIES (the stripped-down qwen3 is there).
QWEN3_THINKING_2507 = replace(BY_NAME["qwen3"], name="qwen3-thinking-2507",
                              template=real_template("Qwen-Qwen3-4B-Thinking-2507"))
QWEN3_HYBRID = replace(BY_NAME["qwen3"], name="qwen3-hybrid", template=real_template("Qwen-Qwen3-0.6B"))

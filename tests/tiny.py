"""Tiny real models for tests: a byte-level BPE tokenizer and a Llama LM small enough to train in a second.

`multi_token_im_end=True` builds a tokenizer that does *not* know ``<|im_end|>`` as a special token, so it is
split into several tokens (the case the GRPO-zero recipe's stopping criterion exists for).
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from kitae.chat import CHATML_TEMPLATE, chatml

CORPUS = [
    "hello world, the answer is 47. what is 12+35? こんにちは、世界。東京は日本の首都です。",
    chatml([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], False),
] * 20


def tiny_tokenizer(multi_token_im_end: bool = False, vocab_size: int = 400) -> PreTrainedTokenizerFast:
    specials = ["<|endoftext|>"] + ([] if multi_token_im_end else ["<|im_start|>", "<|im_end|>"])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=specials
    )
    tok.train_from_iterator(CORPUS, trainer)
    out = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|endoftext|>")
    if not multi_token_im_end:
        out.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    out.chat_template = CHATML_TEMPLATE
    out.padding_side = "left"
    return out


def tiny_llama(vocab_size: int, seed: int = 0, hidden: int = 32, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg)


def overfit(model, tokenizer, texts: list[str], steps: int = 200, lr: float = 2e-2) -> None:
    """Teach the model to reproduce `texts` (greedy decoding then follows them).

    Adam with the learning rate decayed linearly to 0 (a constant rate this high makes the loss spike now and
    then, leaving a half-trained model), on one torch thread whatever the process uses, so the weights are the
    same bit for bit on every machine and thread count.
    """
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    batches = [(torch.tensor([seq]), torch.tensor([seq])) for seq in ids]
    train_one_thread(model, batches, steps, lr)


def train_one_thread(model, batches: list[tuple[torch.Tensor, torch.Tensor]], steps: int, lr: float) -> None:
    """`steps` passes over `batches` of (input_ids, labels), an Adam step after each batch, the rate decayed
    linearly to 0 once per pass; on one torch thread, so the weights are the same on every machine."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / steps)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.train()
        for _ in range(steps):
            for x, labels in batches:
                model(input_ids=x, labels=labels).loss.backward()
                opt.step()
                opt.zero_grad()
            schedule.step()
        model.eval()
    finally:
        torch.set_num_threads(threads)

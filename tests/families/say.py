"""Make a model say chosen tokens: a forward hook that puts all the probability on them, one per forward pass."""

from __future__ import annotations

import torch


class Say:
    """A forward hook on the output layer: the i-th forward pass (prefill, then one per new token) puts all the
    probability on ``tokens[i]`` (the last one from then on), so greedy and sampled decoding say exactly them."""

    def __init__(self, model, tokens: list[int]):
        self.tokens, self.calls = tokens, 0
        self.handle = model.get_output_embeddings().register_forward_hook(self)

    def __call__(self, _module, _inputs, logits):
        tok = self.tokens[min(self.calls, len(self.tokens) - 1)]
        self.calls += 1
        forced = torch.full_like(logits, -1e4)
        forced[..., tok] = 0.0
        return forced

    def remove(self) -> None:
        self.handle.remove()

"""Prompt samplers: which prompts each step trains on. Registered by name; their state survives resume.

A sampler is asked for `k` prompt indices per step and is told afterwards how each prompt did
(`update(indices, pass_rates)`), which the Kimi k1.5 samplers (curriculum, prioritized) use.
"""

from __future__ import annotations

import random
from typing import Any

from kitae.registry import Registry

SAMPLERS = Registry("prompt sampler")


@SAMPLERS.register("uniform")
class UniformSampler:
    """Epochs over a seeded shuffle of the prompts (or in order with shuffle=False); no prompt repeats
    within an epoch. State: (epoch, position), so a resumed run continues the same sequence."""

    def __init__(self, num_prompts: int, seed: int = 0, shuffle: bool = True, **_: Any):
        self.n, self.seed, self.shuffle = num_prompts, seed, shuffle
        self.epoch, self.pos = 0, 0
        self._order = self._make_order()

    def _make_order(self) -> list[int]:
        order = list(range(self.n))
        if self.shuffle:
            random.Random(self.seed * 100_003 + self.epoch).shuffle(order)
        return order

    def sample(self, k: int) -> list[int]:
        out = []
        while len(out) < k:
            if self.pos >= self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._make_order()
            out.append(self._order[self.pos])
            self.pos += 1
        return out

    def update(self, indices: list[int], pass_rates: list[float | None]) -> None:
        pass

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._make_order()

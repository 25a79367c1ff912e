"""The ``optim:`` section of a training config: how long to train, how the batch is cut into micro-batches, and the
optimizer (AdamW) with its learning-rate schedule (kitae.trainer.setup.make_optimizer builds them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kitae.config import setting
from kitae.errors import ConfigError


@dataclass
class OptimConfig:
    steps: int = setting(100, minimum=1)  # training steps (one sample-grade-update round each)
    prompts_per_step: int = setting(8, minimum=1)  # prompts per step (each gets group_size samples)
    micro_batch_size: int = setting(32, minimum=1)  # at most this many sequences per forward/backward (rows of
    # similar length go together, kitae.trainer.batch.micro_batches)
    logprob_chunk_size: int = setting(256, minimum=0)  # positions whose full-vocabulary logits exist at once when
    # the update and the reference pass take log-probs (kitae.trainer.logprobs); 0: a micro-batch's all at once
    skip_zero_advantage: bool = True  # leave rows that cannot change the gradient out of the forward/backward
    # (advantage 0 with no KL term in the loss; no counted token): same gradient, less work
    lr: float = setting(1e-4, above=0)  # AdamW's learning rate
    weight_decay: float = setting(0.0, minimum=0)  # AdamW's weight decay
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])  # each in [0, 1)
    max_grad_norm: float = setting(1.0, above=0)  # gradients are clipped to this norm
    scheduler: Literal["constant", "linear", "cosine"] = "constant"  # the learning rate after warm-up
    warmup_steps: int = setting(0, minimum=0)  # steps of linear warm-up to lr

    def validate(self, path: str) -> None:
        if len(self.betas) != 2:
            raise ConfigError(f"{path}.betas", f"expected two numbers (Adam's beta1, beta2), got {len(self.betas)}")
        for i, beta in enumerate(self.betas):
            if not 0 <= beta < 1:
                raise ConfigError(f"{path}.betas[{i}]", f"must be in [0, 1) (Adam's beta), got {beta}")

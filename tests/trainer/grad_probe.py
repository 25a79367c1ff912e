"""Run by tests/trainer/test_train_e2e.py, in one process or under ``accelerate launch`` in two:

    python -m tests.trainer.grad_probe CONFIG OUT[:ZERO_ROWS] [OUT[:ZERO_ROWS] ...]

builds the Trainer of CONFIG and runs its real ``update.optimize`` on one fixed batch of 8 rows once per loss; each
process takes its share of the rows (process 0 the four long ones, process 1 the four short ones, one of
them masked out entirely); ZERO_ROWS (e.g. "1,4,5,7") sets those rows' advantages to 0. Process 0 saves to
OUT, per loss, the gradient the optimizer would have stepped with (after DDP averaged it), the loss averaged
over processes, as the trainer logs it, and the rows the update skipped. The optimizer never steps, so every
loss (and every OUT: one launch serves several batches) sees the same weights.
"""

from __future__ import annotations

import sys

import torch

from kitae.algorithms.losses import truncation_mask
from kitae.rollout.base import Completion
from kitae.trainer.batch import build_batch, token_logps
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from kitae.trainer.processes import reduce_metrics

LOSSES = ["grpo", "dapo", "dr_grpo", "cispo", "gspo", "kimi"]
PROMPT, COMPLETION_LENGTHS = 5, [6, 6, 5, 6, 1, 2, 1, 2]  # tokens: 23 on process 0, 6 on process 1
ADVANTAGES = [1.0, -0.5, 0.8, -1.2, 2.0, -1.5, 0.7, 1.1]
MASKED = 6  # a truncated row that does not count (overlong filtering): Dr. GRPO's constant still counts it


def full_batch(trainer: Trainer, zero_rows: tuple[int, ...] = ()):
    """Two groups of four samples: rows 0-3 share a prompt, rows 4-7 another and their first sampled token, so
    rows 4 and 6 (one token each) are all prefix."""
    g = torch.Generator().manual_seed(0)
    vocab = trainer.policy.config.vocab_size
    prompts = [torch.randint(3, vocab, (PROMPT,), generator=g).tolist() for _ in range(2)]
    tokens = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in COMPLETION_LENGTHS]
    for i in (5, 6, 7):
        tokens[i][0] = tokens[4][0]
    completions = [
        Completion(text="", prompt_ids=prompts[i // 4], completion_ids=t, logprobs=[0.0] * len(t),
                   finish_reason="length" if i == MASKED else "stop")
        for i, t in enumerate(tokens)
    ]
    advantages = [0.0 if i in zero_rows else a for i, a in enumerate(ADVANTAGES)]
    batch = build_batch(completions, advantages, trainer.tokenizer.pad_token_id)
    batch.mask = truncation_mask([c.finish_reason for c in completions], batch.mask)
    with torch.no_grad():  # old log-probs = the current policy's: ratio 1, nothing clipped
        batch.old_logp = token_logps(trainer.policy, batch, trainer.cfg.sampling.temperature)[0] * batch.mask
    return batch


def main(config: str, *jobs: str) -> None:
    """Each job is ``OUT`` or ``OUT:ZERO_ROWS``."""
    trainer = Trainer(load_train_config(config))
    grads: list[list[torch.Tensor]] = []

    def capture(*args, **kwargs):  # instead of stepping: keep the (DDP-averaged) gradient
        grads.append([p.grad.detach().clone() for p in trainer.model.parameters()])

    trainer.optimizer.step = capture
    for job in jobs:
        out, _, zero_rows = job.partition(":")
        probe(trainer, config, out, tuple(int(i) for i in zero_rows.split(",") if i), grads)
    if trainer.store is not None:  # the main process's run store (a test may call main in its own process)
        trainer.store.close()


def probe(trainer: Trainer, config: str, out: str, zero_rows: tuple[int, ...], grads: list) -> None:
    acc = trainer.acc
    batch = full_batch(trainer, zero_rows)
    share = len(batch) // acc.num_processes
    local = batch.select(slice(acc.process_index * share, (acc.process_index + 1) * share))
    results = {}
    for name in LOSSES:
        trainer.cfg.algorithm = load_train_config(config, [f"algorithm.loss={name}"]).algorithm  # its own defaults
        metrics = reduce_metrics(acc, trainer.update.optimize(local, trainer.loss_config()))
        results[name] = {"grad": grads.pop(), "loss": metrics["loss"], "skipped_rows": metrics["skipped_rows"]}
    if acc.is_main_process:
        torch.save(results, out)
    acc.wait_for_everyone()


if __name__ == "__main__":
    main(*sys.argv[1:])

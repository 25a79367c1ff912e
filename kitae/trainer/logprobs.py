"""Per-token log-probs of the chosen tokens and the entropy, from the model's final hidden states chunk by chunk.

The update and the reference pass need, per counted position, log softmax(logits / T) at the sampled token (and
the entropy of that distribution, for the metric). Computing them from the model's output logits materialises
[positions x vocabulary] fp32 logits for a whole micro-batch: with Qwen's 151,936 tokens, 8 samples x 2,048
positions are 10 GB, more again for the backward. Here the model's forward stops before its output layer (a
forward pre-hook on ``get_output_embeddings()`` takes the hidden states and hands the layer only the last
position), and the output layer, the logit soft-capping of Gemma 2/3 and the fp32 log-softmax run
``chunk_size`` positions at a time. In training each chunk runs under activation checkpointing
(``torch.utils.checkpoint``), so the backward recomputes one chunk's logits at a time instead of keeping every
chunk's alive. The numbers are the full computation's: the same matmul and the same fp32 reductions, per
position, to float rounding (tests/trainer/test_logprobs.py: 1e-6, gradients included). The log-softmax and entropy
of a chunk are one autograd Function (:func:`chunk_stats`) that keeps one [chunk x vocabulary] fp32 temporary beside
the logits in the forward and one in the backward (plus an fp32 copy of the logits when they are not fp32 or T is
not 1): at most chunk x vocabulary x (8 + 2 x the logits' bytes) bytes at once.

The forward itself is the model's own (autocast, DDP, LoRA, a vision model's image merging, the hook that masks a
vision model's placeholder tokens all run as before). Where the model cannot be split this way, the whole logits
are computed as before and reduced chunk by chunk (no memory saved, the same numbers):

- a model without ``get_output_embeddings()``, or whose forward does not call that layer (an unknown architecture);
- a model whose own logits differ from the output layer's plus soft-capping (another scaling: Cohere's
  ``logit_scale``, Granite's ``logits_scaling``): checked on every forward at the one position the layer computes;
- a model sharded with FSDP2: its output layer's weights are gathered only during the model's forward.

``chunk_size`` is ``optim.logprob_chunk_size`` (:data:`DEFAULT_CHUNK_SIZE` positions); 0 turns chunking off.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch.utils.checkpoint import checkpoint

from kitae.trainer.config import OptimConfig

# Positions whose full-vocabulary logits exist at once: 256 x 151,936 x 4 bytes = 156 MB of fp32 logits, and one
# temporary of that size, for a Qwen vocabulary, however long the micro-batch (docs/performance.md measures it).
DEFAULT_CHUNK_SIZE: int = OptimConfig.logprob_chunk_size


def logits_transform(model) -> float | None:
    """The final logit soft-capping the model applies after its output layer (Gemma 2, Gemma 3), or None."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    cap = getattr(text, "final_logit_softcapping", None)
    return float(cap) if cap else None


def capped(logits: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """``softcap * tanh(logits / softcap)`` as the model's forward computes it (identity without a cap)."""
    if softcap is None:
        return logits
    return torch.tanh(logits / softcap) * softcap


def _unwrapped(model):
    """The module under a DDP wrapper (its forward is still called through the wrapper)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def _is_fsdp(model) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without FSDP2
        return False
    return any(isinstance(m, FSDPModule) for m in _unwrapped(model).modules())


def output_layer(model) -> torch.nn.Module | None:
    """The model's output layer when its logits can be computed outside its forward, else None."""
    inner = _unwrapped(model)
    get = getattr(inner, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if not isinstance(head, torch.nn.Module) or _is_fsdp(model):
        return None
    return head


@contextmanager
def _head_inputs(head: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """While open, the output layer called from this thread gets only its input's last position and the full input
    [..., K, H] is appended to the yielded list (other threads, a rollout engine sharing the model, are untouched)."""
    seen: list[torch.Tensor] = []
    me = threading.get_ident()

    def take(_module, args, kwargs):
        if threading.get_ident() != me or seen or not args:
            return None
        seen.append(args[0])
        return (args[0][..., -1:, :], *args[1:]), kwargs

    handle = head.register_forward_pre_hook(take, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def hidden_or_logits(model, inputs: dict[str, Any]) -> tuple[torch.Tensor | None, torch.Tensor]:
    """One forward of ``model`` on ``inputs``: (the output layer's input [..., K, H], the logits of its last
    position [..., 1, V]) when the model splits there (see the module docstring), else (None, the model's logits
    [..., K, V])."""
    head = output_layer(model)
    if head is None:
        return None, model(**inputs).logits
    with _head_inputs(head) as seen:
        logits = model(**inputs).logits
    if not seen:  # the forward did not call the layer: its logits are the whole ones
        return None, logits
    hidden = seen[0]
    with torch.no_grad():  # the model's own logits at the last position must be the layer's plus the soft-cap
        ours = capped(head(hidden[..., -1:, :]), logits_transform(_unwrapped(model)))
    if ours.shape != logits.shape or not torch.allclose(ours.float(), logits.float(), rtol=1e-4, atol=1e-4):
        return None, model(**inputs).logits  # another transformation after the layer: the model's own path
    return hidden, logits


class _LogpEntropy(torch.autograd.Function):
    """log softmax(logits / T) at ``targets`` and the entropy, with at most one [c, V] fp32 temporary beside the
    logits in the forward and one in the backward (log_softmax + gather through autograd keeps three or four)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, temperature: float):
        x = _scaled(logits, temperature)  # [c, V] fp32 (the logits themselves when fp32 at T 1)
        top = x.max(dim=-1).values  # [c]
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # a row of -inf: no nan from -inf - -inf
        e = (x - top[:, None]).exp_()  # [c, V] the one temporary
        total = e.sum(dim=-1)  # [c]
        norm = top + total.log()  # [c] logsumexp
        logp = x.gather(-1, targets[:, None]).squeeze(-1) - norm  # [c]
        # H = logsumexp - sum p * x; a -inf logit gives 0 * -inf = nan, a term of 0 (nansum)
        entropy = norm - e.mul_(x).nansum(dim=-1) / total  # [c]
        ctx.save_for_backward(logits, targets, norm)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor, _grad_entropy):
        logits, targets, norm = ctx.saved_tensors
        T = ctx.temperature
        x = _scaled(logits, T)
        p = x.sub_(norm[:, None]).exp_() if x is not logits else (x - norm[:, None]).exp_()  # [c, V] softmax
        grad = p.mul_(-grad_logp[:, None])  # d logp / d x = onehot - softmax
        grad.scatter_add_(-1, targets[:, None], grad_logp[:, None].to(grad.dtype))
        if T > 0 and T != 1.0:
            grad.div_(T)
        return grad.to(logits.dtype), None, None


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    x = logits.float()
    return x / temperature if temperature > 0 and temperature != 1.0 else x


def chunk_stats(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-prob of ``targets`` [c], entropy [c] (no gradient)) under softmax(logits / T), in fp32; logits [c, V].

    -inf logits (banned tokens) are allowed: their probability and entropy term are 0.
    Example: logits [[0, 0]], target [1] -> (log 1/2, ln 2) = (-0.6931, 0.6931).
    """
    return _LogpEntropy.apply(logits, targets, temperature)


def chosen_logps(model, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [N], entropies [N]) of the N positions' ``targets`` from their final hidden states [N, H],
    through the model's output layer ``chunk_size`` positions at a time (all at once for 0). With gradients on,
    each chunk is checkpointed: its logits are freed after the forward and recomputed in the backward."""
    head, softcap = output_layer(model), logits_transform(_unwrapped(model))

    def stats(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return chunk_stats(capped(head(h), softcap), t, temperature)  # [c, V] logits, gone on return

    step = chunk_size if chunk_size > 0 else max(1, hidden.shape[0])
    checkpointed = torch.is_grad_enabled() and chunk_size > 0  # also when only the output layer is trained
    parts = [checkpoint(stats, hidden[i : i + step], targets[i : i + step], use_reentrant=False) if checkpointed
             else stats(hidden[i : i + step], targets[i : i + step]) for i in range(0, hidden.shape[0], step)]
    return _cat(parts, hidden)


def logits_logps(logits: torch.Tensor, targets: torch.Tensor, temperature: float,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [N], entropies [N]) from logits [N, V] the model already computed (the fallback path), reduced
    in fp32 ``chunk_size`` positions at a time."""
    step = chunk_size if chunk_size > 0 else max(1, logits.shape[0])
    parts = [chunk_stats(logits[i : i + step], targets[i : i + step], temperature)
             for i in range(0, logits.shape[0], step)]
    return _cat(parts, logits)


def _cat(parts: list[tuple[torch.Tensor, torch.Tensor]], like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not parts:
        empty = like.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat([p for p, _ in parts]), torch.cat([e for _, e in parts])

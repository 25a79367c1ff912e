"""The transformers rollout engine: batched sampling with a KV cache, left padding and per-token log-probs.

Its own decoding loop rather than `model.generate`, because the trainer needs, for every sample, the
sampling policy's log-prob of each token and the reason it ended, and because it can do less work than
`generate` on RL batches:
- each prompt is prefilled once and its KV cache repeated for its `n` samples;
- finished rows leave the batch, so a few long samples do not make every row pay for them: a row from the end
  of the batch takes a finished row's place (:func:`refill`), so only the moved rows' cache is copied, and the
  rows are sampled in their original order (:func:`sample_in_order`: the same draws, wherever a row sits);
- the KV cache reserves room for the whole sample up front (:func:`reserved_cache`) and writes each token's keys
  and values in place, where transformers' DynamicCache concatenates, copying the whole cache at every layer
  and token (a fifth of the decode time of a 20M-parameter model: docs/performance.md).

Prompts are encoded, stops matched and texts decoded by the engine's :class:`kitae.rollout.codec.TokenCodec` (the
server engine holds one too, so both read tokens the same way). With ``SamplingParams.repeat_min_count`` set, a
sample that loops (its tail is one short block repeated, :func:`repeat_period`) ends early with finish reason
"repeat" (Kimi k1.5 §2.6.2).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from typing import Any

import torch

from kitae.chat import EndMarker, Message
from kitae.models import load_causal_lm, load_tokenizer
from kitae.registry import load_target
from kitae.rollout.base import Completion, RolloutEngine, SamplesImages, SamplesInWorker, SamplingParams
from kitae.rollout.codec import HoldsCodec, TokenCodec, repeat_period

VISION_FORM = "kitae.rollout.vision:VisionEngine"  # the in-process engine for image prompts (SamplesImages)


class HFEngine(HoldsCodec, RolloutEngine, SamplesInWorker, SamplesImages):
    """Rollout engine over a transformers causal LM. The trainer shares its model object (no weight sync). It
    applies the chat template itself, continues token ids, is built again over the rollout worker's copy of the
    policy for ``sampling.async``, and samples image prompts in its vision form (kitae.rollout.base's abilities).

    ``end_marker``: the model's end of turn (default: :func:`kitae.chat.end_marker_of` the tokenizer);
    ``chat_template_kwargs``: the chat template's variables for every prompt (Qwen3's ``enable_thinking``);
    ``codec``: a codec holding these, given instead of them."""

    def __init__(self, model: Any, tokenizer: Any, max_batch_size: int = 128, end_marker: EndMarker | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None, codec: TokenCodec | None = None):
        self.model = model
        self.codec = codec if codec is not None else TokenCodec(tokenizer, end_marker, chat_template_kwargs)
        self.max_batch_size = max_batch_size

    def on_model(self, model: Any) -> "HFEngine":
        """This engine (the same codec and batch size) sampling with ``model``: the rollout worker's copy."""
        other = copy.copy(self)
        other.model = model
        return other

    @classmethod
    def for_images(cls, model: Any, tokenizer: Any, processor: Any) -> "HFEngine":
        """The vision form (kitae.rollout.vision.VisionEngine) over a vision-language model and its processor; named
        as a lazy "module:Class", as the engine registry names engines (vision.py builds on this module)."""
        return load_target(VISION_FORM)(model, tokenizer, processor)

    @classmethod
    def from_pretrained(cls, path: str | None, dtype: str = "float32", device: str = "cpu", **kw) -> "HFEngine":
        return cls(load_causal_lm(path, dtype, device), load_tokenizer(path), **kw)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ---- public ---------------------------------------------------------------------------------
    def generate(
        self, prompts: list[list[Message]], n: int, sampling: SamplingParams
    ) -> list[list[Completion]]:
        return self.generate_tokens([self.encode_prompt(m) for m in prompts], n, sampling)

    def generate_tokens(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams,
        image_inputs: list[dict[str, torch.Tensor] | None] | None = None,
    ) -> list[list[Completion]]:
        """`generate` from token ids; partial rollouts continue a trajectory by passing prompt + its tokens so far.
        ``image_inputs``: per prompt, the image tensors a vision-language model reads with it (kitae.rollout.vision)."""
        sampling = self.ending(sampling)
        gen = None
        if sampling.seed is not None:
            gen = torch.Generator(device=self.device).manual_seed(sampling.seed)
        per_chunk = max(1, self.max_batch_size // n)
        flat: list[Completion] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(prompt_ids), per_chunk):
                images = image_inputs[start : start + per_chunk] if image_inputs is not None else None
                flat += self._generate_batch(prompt_ids[start : start + per_chunk], n, sampling, gen, images)
        finally:
            self.model.train(was_training)
        return [flat[i * n : (i + 1) * n] for i in range(len(prompt_ids))]

    # ---- decoding loop --------------------------------------------------------------------------
    @torch.no_grad()
    def _generate_batch(
        self, prompt_ids: list[list[int]], n: int, sp: SamplingParams, gen: torch.Generator | None,
        image_inputs: list[dict[str, torch.Tensor] | None] | None = None,
    ) -> list[Completion]:
        dev = self.device
        input_ids, attn = left_pad(prompt_ids, self.tokenizer.pad_token_id, dev)  # [P, L]
        pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [P, L]
        cache = reserved_cache(input_ids.shape[1] + sp.max_new_tokens)
        images = batch_image_inputs(image_inputs, dev) if image_inputs is not None else {}  # read at prefill only
        out = self.model(
            input_ids=input_ids, attention_mask=attn, position_ids=pos, cache=cache, logits_to_keep=1, **images
        )
        cache = out.cache
        if n > 1:  # prefill once per prompt, then one cache row per sample
            cache.batch_repeat_interleave(n)
        logits = out.logits[:, -1, :].float().repeat_interleave(n, dim=0)  # [B, V], B = P * n
        attn = attn.repeat_interleave(n, dim=0)  # [B, L]
        last_pos = pos[:, -1].repeat_interleave(n, dim=0)  # [B]
        rows = [i for i in range(len(prompt_ids)) for _ in range(n)]

        B = len(rows)
        active = torch.arange(B, device=dev)  # original row index of each batch row
        seen = self._seen_mask(input_ids.repeat_interleave(n, dim=0), attn, logits.shape[-1], sp)
        tokens: list[list[int]] = [[] for _ in range(B)]
        logps: list[list[float]] = [[] for _ in range(B)]
        finish: list[str | None] = [None] * B
        codec = self.codec
        stops = codec.stop_ids(tuple(sp.stop))

        order = None  # the batch rows in sampling order (by original row) once rows were moved; None: in order
        for step in range(sp.max_new_tokens):
            nxt, lp = sample_in_order(logits, sp, seen, gen, order)  # [A], [A]
            if seen is not None:
                seen[torch.arange(len(nxt), device=dev), nxt] = True
            keep = []
            for j, (row, tok, l) in enumerate(zip(active.tolist(), nxt.tolist(), lp.tolist())):
                tokens[row].append(tok)
                logps[row].append(l)
                if codec.hit_stop(tokens[row], stops):
                    finish[row] = "stop"
                elif sp.repeat_min_count and repeat_period(
                    tokens[row], sp.repeat_max_period, sp.repeat_min_count, sp.repeat_min_span
                ):
                    finish[row] = "repeat"
                elif step == sp.max_new_tokens - 1:
                    finish[row] = "length"
                else:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(active):
                idx = torch.tensor(refill(keep), device=dev)
                cache.batch_select_indices(idx)
                active, nxt, attn, last_pos = active[idx], nxt[idx], attn[idx], last_pos[idx]
                seen = seen[idx] if seen is not None else None
                by_row = active.argsort()
                order = None if bool((by_row == torch.arange(len(keep), device=dev)).all()) else by_row
            attn = torch.cat([attn, attn.new_ones(len(active), 1)], dim=1)  # [A, L+t+1]
            last_pos = last_pos + 1
            out = self.model(
                input_ids=nxt[:, None],
                attention_mask=attn,
                position_ids=last_pos[:, None],
                cache=cache,
            )
            cache = out.cache
            logits = out.logits[:, -1, :].float()  # [A, V]

        return [
            codec.completion(prompt_ids[rows[i]], tokens[i], logps[i], finish[i] or "length", sp.stop,
                             image_inputs[rows[i]] if image_inputs is not None else None)
            for i in range(B)
        ]

    def _seen_mask(self, ids: torch.Tensor, attn: torch.Tensor, vocab: int, sp: SamplingParams):
        """[B, V] bool of the tokens each row has seen (prompt and output), for the repetition penalty."""
        if sp.repetition_penalty == 1.0:
            return None
        seen = torch.zeros(ids.shape[0], vocab, dtype=torch.bool, device=ids.device)
        seen.scatter_(1, ids.clamp(max=vocab - 1), attn.bool())
        return seen


def reserved_cache(capacity: int):
    """A transformers DynamicCache whose layers hold ``capacity`` positions from the start: the keys and values of
    each new token are written in place and each layer returns views of its filled part (no per-token torch.cat).
    Repeating rows (one per sample) copies the filled positions; dropping rows (finished samples) copies only
    the filled positions of the rows that change place."""
    layer, cache = _reserved_cache_classes()
    return cache(functools.partial(layer, capacity))


@functools.cache
def _reserved_cache_classes():
    from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

    class ReservedLayer(DynamicLayer):
        def __init__(self, capacity: int):
            super().__init__()
            self.capacity, self.length = capacity, 0

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.device = key_states.device
            self._room(key_states[:, :, :0], value_states[:, :, :0])
            self.is_initialized = True

        def _room(self, keys: torch.Tensor, values: torch.Tensor) -> None:
            """Buffers [B, H, max(capacity, filled), D] holding `keys`/`values` [B, H, filled, D] at the front."""
            self.length = keys.shape[-2]
            size = max(self.capacity, self.length)
            self._keys = keys.new_empty(*keys.shape[:2], size, keys.shape[-1])
            self._values = values.new_empty(*values.shape[:2], size, values.shape[-1])
            self._keys[:, :, : self.length] = keys
            self._values[:, :, : self.length] = values
            self.keys = self._keys[:, :, : self.length]  # [B, H, filled, D] views
            self.values = self._values[:, :, : self.length]

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self.length + key_states.shape[-2]
            if end > self._keys.shape[-2]:  # past the reserved room (not in the engine's own use): make more
                self._room(torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2))
                return self.keys, self.values
            self._keys[:, :, self.length : end] = key_states
            self._values[:, :, self.length : end] = value_states
            self.length = end
            self.keys = self._keys[:, :, :end]
            self.values = self._values[:, :, :end]
            return self.keys, self.values

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.is_initialized:
                self._room(self.keys.repeat_interleave(repeats, dim=0), self.values.repeat_interleave(repeats, dim=0))

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            """Rows ``indices`` of the batch, in place: only the rows whose place changes are copied (the
            engine fills a finished row's place with a row from the end, :func:`refill`)."""
            if not self.is_initialized:
                return
            n = len(indices)
            if n > self._keys.shape[0]:  # more rows than there is room for (repeating rows): new buffers
                self._room(self.keys[indices], self.values[indices])
                return
            moved = (indices != torch.arange(n, device=indices.device)).nonzero().squeeze(-1)
            if len(moved):
                src = indices[moved]
                self._keys[moved, :, : self.length] = self._keys[src, :, : self.length]
                self._values[moved, :, : self.length] = self._values[src, :, : self.length]
            self._keys, self._values = self._keys[:n], self._values[:n]
            self.keys = self._keys[:, :, : self.length]
            self.values = self._values[:, :, : self.length]

    class ReservedCache(DynamicCache):
        def __init__(self, make_layer) -> None:
            Cache.__init__(self, layer_class_to_replicate=make_layer)

    return ReservedLayer, ReservedCache


def refill(keep: list[int]) -> list[int]:
    """The batch rows to keep (``keep``, ascending) placed so that fewest rows move: a kept row stays where it
    is, and each place left by a finished row below ``len(keep)`` takes a kept row from above it.

    >>> refill([0, 2, 3, 5])
    [0, 5, 2, 3]
    """
    n, kept = len(keep), set(keep)
    movers = iter(j for j in keep if j >= n)
    return [j if j in kept else next(movers) for j in range(n)]


def sample_in_order(
    logits: torch.Tensor, sp: SamplingParams, seen: torch.Tensor | None, gen: torch.Generator | None,
    order: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sample_next` over the batch rows taken in ``order`` (None: as they are), the results put back in
    the batch's order: the draws of one generator go to the rows in the same order however the rows are placed."""
    if order is None:
        return sample_next(logits, sp, seen, gen)
    nxt, lp = sample_next(logits[order], sp, seen[order] if seen is not None else None, gen)
    return nxt.new_empty(nxt.shape).index_copy_(0, order, nxt), lp.new_empty(lp.shape).index_copy_(0, order, lp)


def batch_image_inputs(per_row: list[dict[str, torch.Tensor] | None], device) -> dict[str, torch.Tensor]:
    """The image tensors of several prompts as one model input: each key's tensors concatenated along dim 0
    (images or patches) in row order, the order in which the rows' image tokens appear in the batch."""
    rows = [r for r in per_row if r]
    return {k: torch.cat([r[k] for r in rows]).to(device) for k in (rows[0] if rows else {})}


def left_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and attention mask, both [len(seqs), max_len]."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s) :] = 1
    return ids.to(device), mask.to(device)


def sample_next(
    logits: torch.Tensor,
    sp: SamplingParams,
    seen: torch.Tensor | None,
    gen: torch.Generator | Sequence[torch.Generator | None] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next tokens [A] and their log-probs [A] under log_softmax(logits / T) (T = 1 when greedy).

    ``gen``: one generator for the batch, or one per row (None: torch's global one), so that a row's draws
    depend on its own generator only, whatever else is in the batch (kitae serve model's continuous batching).
    """
    temp = sp.temperature if sp.temperature > 0 else 1.0
    policy_logp = torch.log_softmax(logits / temp, dim=-1)  # [A, V]
    scores = logits
    if seen is not None:  # HF's repetition penalty: shrink the logits of tokens already seen
        pen = torch.where(scores > 0, scores / sp.repetition_penalty, scores * sp.repetition_penalty)
        scores = torch.where(seen, pen, scores)
    if sp.temperature <= 0:
        nxt = scores.argmax(dim=-1)  # [A]
    else:
        scores = filter_top_k_top_p(scores / sp.temperature, sp.top_k, sp.top_p)
        probs = torch.softmax(scores, dim=-1)
        nxt = _multinomial(probs, gen)  # [A]
    return nxt, policy_logp.gather(-1, nxt[:, None]).squeeze(-1)


def _multinomial(
    probs: torch.Tensor, gen: torch.Generator | Sequence[torch.Generator | None] | None
) -> torch.Tensor:
    """One draw per row of ``probs`` [A, V] -> [A]; with one generator per row, each row is drawn alone."""
    if gen is None or isinstance(gen, torch.Generator):
        return torch.multinomial(probs, 1, generator=gen).squeeze(-1)
    return torch.cat([torch.multinomial(probs[i : i + 1], 1, generator=g).squeeze(-1) for i, g in enumerate(gen)])


def filter_top_k_top_p(scores: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Scores [A, V] with tokens outside top-k / the top-p nucleus set to -inf (at least one token kept)."""
    if top_k and 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]  # [A, 1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True, dim=-1, stable=True)
        cum = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)  # [A, V]
        drop_sorted = cum - torch.softmax(sorted_scores, dim=-1) >= top_p  # mass before this token already >= p
        drop_sorted[..., 0] = False  # the top token stays, also at top_p 0
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores

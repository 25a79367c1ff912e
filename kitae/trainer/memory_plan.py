"""A memory plan before the run: what a training config will hold on each device, from the model's config.json
alone (no weights are read), whether it fits, and which setting would make it fit (`kitae plan`).

What one GRPO step holds, and when (kitae.trainer.loop: sample, grade, update):

* all the time: the weights (by dtype; a quantized base at 4 or 8 bits per quantized weight plus its
  constants), the LoRA adapter, AdamW's two float32-or-weight-dtype states per trained parameter, a reference
  model when the KL is on without LoRA (with LoRA the reference is the base with the adapter disabled: nothing
  extra), a reward model scored in this process, and the framework's own overhead (CUDA context, allocator);
* while sampling (in-process engine): the KV cache of every sequence the engine decodes at once;
* while updating: the gradients, the activations of one micro-batch (with or without gradient checkpointing),
  and the log-prob logits (one chunk of positions, or the whole micro-batch's when log-probs are not chunked).

The peak is the first group plus the larger of the other two (the allocator reuses the KV cache's memory for
the update); with ``sampling.async`` the rollout worker's own copy of the model samples during the update, so
both phases and that copy count at once. Estimates, not measurements: tests/trainer/test_memory_plan.py checks
the plan against peaks measured on CPU (docs/scale.md#memory-plan says at which sizes, and how close).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kitae.config import apply_overrides, from_dict, read_yaml
from kitae.errors import ConfigError

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# The fixed cost of a CUDA process before any tensor: the context, cuBLAS/cuDNN workspaces and what the caching
# allocator holds back (fragmentation). A stated constant: about 1 GiB is what PyTorch processes report.
CUDA_OVERHEAD = 1.0 * GIB
# On CPU: what a run holds beyond the modules it imports and its tensors: the tokenizer, the run store, the data,
# accelerate, malloc's arenas. Measured as the model-independent part of the peaks of
# tests/trainer/test_memory_plan.py: 190-225 MB at 0.16M, 2M and 14M parameters.
CPU_OVERHEAD = 240 * 1024**2

# Activations kept for the backward per token and layer, in elements of the compute dtype: vectors of the hidden
# size (the norms' inputs, q, k, v, the attention output, the residual stream) and of the MLP's width (gate, up,
# their product). Fitted to the peaks measured on CPU in float32 (tests/trainer/test_memory_plan.py: within a
# few % at 2M and 14M parameters); under bf16 autocast on a GPU the casts add copies this does not count
# (benchmarks/gpu_qlora.py measures that on a GPU). Gradient checkpointing keeps one hidden vector per layer
# (its input) and recomputes one layer's activations at a time in the backward.
ACT_HIDDEN, ACT_MLP = 7, 2
# Float32 copies of the [positions x vocab] logits alive at once in the update: the model's logits, their float32
# copy (or the temperature-scaled one), the softmax for the entropy and log-sum-exp, and their gradient.
LOGIT_COPIES = 4
# The chunk of positions the chunked log-prob path holds full-vocabulary logits for at once
# (``optim.logprob_chunk_size``'s default where that field exists; 0 there means not chunked), the chunk the
# plan suggests for a run that turned chunking off. A kitae without the field takes log-probs of a whole
# micro-batch at once, and the plan counts that.
LOGPROB_CHUNK = 256  # kitae.trainer.logprobs.DEFAULT_CHUNK_SIZE (a test holds them equal; this module imports no torch)
# bitsandbytes' quantization constants per weight: one float32 absmax per block of 64 (4-bit), or with double
# quantization an 8-bit absmax per 64 and a float32 per 256 blocks; LLM.int8: one float32 per row (ignored).
QUANT_CONSTANTS = {(4, False): 4 / 64, (4, True): 1 / 64 + 4 / (64 * 256), (8, False): 0.0, (8, True): 0.0}
# The HF engine decodes this many sequences at once (kitae.rollout.hf.HFEngine's max_batch_size): whole groups.
ENGINE_BATCH = 128
PROMPT_TOKENS = 256  # prompt length assumed when none is given (`kitae plan --prompt-tokens`)


# ---- the model's shape, from config.json ----------------------------------------------------------------------
@dataclass(frozen=True)
class ModelShape:
    """What the plan needs of a decoder-only transformer, read from its config.json."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool = False

    @classmethod
    def from_config(cls, config: dict[str, Any], where: str = "config.json") -> "ModelShape":
        c = config.get("text_config") or config  # a vision-language model's language part
        try:
            hidden, heads = int(c["hidden_size"]), int(c["num_attention_heads"])
            return cls(layers=int(c["num_hidden_layers"]), hidden=hidden, intermediate=int(c["intermediate_size"]),
                       heads=heads, kv_heads=int(c.get("num_key_value_heads") or heads),
                       head_dim=int(c.get("head_dim") or hidden // heads), vocab=int(c["vocab_size"]),
                       tied=bool(config.get("tie_word_embeddings", c.get("tie_word_embeddings", False))),
                       qkv_bias=c.get("model_type") == "qwen2" or bool(c.get("attention_bias")))
        except KeyError as exc:
            raise ConfigError(where, f"has no {exc.args[0]!r}: the plan needs a decoder-only transformer's "
                              "config.json (hidden_size, num_hidden_layers, num_attention_heads, "
                              "intermediate_size, vocab_size)") from None

    def linear_params(self) -> dict[str, int]:
        """Parameters of each linear layer kind in one decoder layer (the layers LoRA and quantization touch)."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {"q_proj": h * q, "k_proj": h * kv, "v_proj": h * kv, "o_proj": q * h,
                "gate_proj": h * i, "up_proj": h * i, "down_proj": i * h}

    def lora_params(self, r: int, targets: list[str]) -> int:
        """A rank-r adapter on `targets`: r x (in + out) per layer and target."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        sizes = {"q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h,
                 "gate_proj": h + i, "up_proj": h + i, "down_proj": i + h}
        return self.layers * sum(r * sizes.get(t, 2 * h) for t in targets)

    @property
    def quantizable(self) -> int:
        """Parameters in the decoder layers' linear layers (bitsandbytes quantizes these, not the embeddings,
        the norms or the output head)."""
        return self.layers * sum(self.linear_params().values())

    @property
    def params(self) -> int:
        bias = self.layers * (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.quantizable + bias + embeddings + (2 * self.layers + 1) * self.hidden


def read_model_config(path: str, revision: str | None = None) -> tuple[dict[str, Any], str]:
    """(config.json of `model.path` as kitae resolves it: bundled, a folder, or a Hub id from the cache, the
    folder it came from). Only config.json is read."""
    from kitae.models import resolve_model_path

    folder = Path(resolve_model_path(path, "model.path", revision=revision))
    file = folder / "config.json"
    try:
        return json.loads(file.read_text(encoding="utf-8")), str(folder)
    except (OSError, ValueError) as exc:
        raise ConfigError("model.path", f"cannot read {file}: {exc}") from None


# ---- the settings the plan reads ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Quantization:
    """``model.quantization``: a bitsandbytes-quantized base (read from the raw config on a kitae whose
    ModelConfig has no such field yet)."""

    bits: int = 4
    type: str = "nf4"
    double_quant: bool = True
    compute_dtype: str = "auto"  # auto: model.dtype

    @classmethod
    def read(cls, raw: Any) -> "Quantization | None":
        if raw is None:
            return None
        if dataclasses.is_dataclass(raw):  # the config class's own field (kitae.quantization): the keys read here
            raw = {k: v for k, v in dataclasses.asdict(raw).items() if k in {f.name for f in dataclasses.fields(cls)}}
        if not isinstance(raw, dict):
            raise ConfigError("model.quantization", f"expected a mapping {{bits: 4, type: nf4}}, got {raw!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(raw) - known
        if unknown:
            raise ConfigError(f"model.quantization.{sorted(unknown)[0]}", f"unknown key (valid: {', '.join(known)})")
        q = cls(**raw)
        if q.bits not in (4, 8):
            raise ConfigError("model.quantization.bits", f"must be 4 or 8, got {q.bits!r}")
        if q.type not in ("nf4", "fp4"):
            raise ConfigError("model.quantization.type", f"must be nf4 or fp4, got {q.type!r}")
        if q.compute_dtype != "auto" and q.compute_dtype not in DTYPE_BYTES:
            raise ConfigError("model.quantization.compute_dtype", f"must be auto, {', '.join(DTYPE_BYTES)}; got "
                              f"{q.compute_dtype!r}")
        return q

    def bytes_per_weight(self) -> float:
        return self.bits / 8 + QUANT_CONSTANTS[(self.bits, bool(self.double_quant) and self.bits == 4)]


@dataclass
class Setup:
    """Everything the plan reads of a run: the typed config, the settings a kitae without their config field
    takes from the raw config (quantization, the log-prob chunk), the model's shape, the device kind."""

    cfg: Any  # kitae.trainer.config.TrainConfig
    shape: ModelShape
    quantization: Quantization | None
    logprob_chunk: int  # positions of full-vocabulary logits at once; 0 = the whole micro-batch
    cuda: bool
    prompt_tokens: int = PROMPT_TOKENS
    reward_model: ModelShape | None = None  # a reward model scored in this process
    reward_dtype: str = "float32"


def load_setup(config: str | Path, overrides: list[str] | None = None, cuda: bool = True,
               prompt_tokens: int | None = None) -> Setup:
    """The plan's inputs from a config file and ``--set`` overrides (ConfigError names a bad value)."""
    from kitae.trainer.config import TrainConfig

    raw = read_yaml(config)
    apply_overrides(raw, overrides or [])
    return setup_of(from_dict(TrainConfig, raw), cuda, prompt_tokens)


def setup_of(cfg: Any, cuda: bool, prompt_tokens: int | None = None) -> Setup:
    """The plan's inputs from a read TrainConfig. `prompt_tokens` None: PROMPT_TOKENS, or less where the model's
    context leaves less room."""
    quant = Quantization.read(cfg.model.quantization)
    chunk = cfg.optim.logprob_chunk_size
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 0:
        raise ConfigError("optim.logprob_chunk_size", f"must be a whole number >= 0, got {chunk!r}")
    config_json, _ = read_model_config(cfg.model.path, cfg.model.revision)
    if prompt_tokens is None:
        context = (config_json.get("text_config") or config_json).get("max_position_embeddings")
        room = context - cfg.max_completion_tokens if isinstance(context, int) else PROMPT_TOKENS
        prompt_tokens = max(1, min(PROMPT_TOKENS, room))
    setup = Setup(cfg, ModelShape.from_config(config_json, f"{cfg.model.path}: config.json"), quant, chunk, cuda,
                  prompt_tokens)
    _add_reward_model(setup)
    return setup


def _add_reward_model(setup: Setup) -> None:
    """A reward_model grader with a local ``model`` (not a ``url``) scores in this process: its weights count."""
    from kitae.models import BUNDLED_RM

    for reward in setup.cfg.rewards:
        spec = reward.grader or {}
        if spec.get("type") != "reward_model" or spec.get("url"):
            continue
        model = str(spec.get("model") or "bundled")
        config_json, _ = read_model_config(str(BUNDLED_RM) if model in ("bundled", "kitae-tiny-rm") else model)
        setup.reward_model = ModelShape.from_config(config_json, f"rewards.{reward.name}.grader.model: config.json")
        setup.reward_dtype = spec.get("dtype", "float32")


# ---- the plan ------------------------------------------------------------------------------------------------------
@dataclass
class Row:
    what: str
    bytes: float
    note: str = ""
    phase: str = "static"  # static | rollout | update


@dataclass
class DevicePlan:
    name: str
    rows: list[Row] = field(default_factory=list)
    together: bool = False  # async: the rollout and the update phases at once

    def phase(self, name: str) -> float:
        return sum(r.bytes for r in self.rows if r.phase == name)

    @property
    def peak(self) -> float:
        static, rollout, update = self.phase("static"), self.phase("rollout"), self.phase("update")
        return static + (rollout + update if self.together else max(rollout, update))


def weights_row(s: Setup, shape: ModelShape, what: str = "weights") -> Row:
    dtype = _weight_dtype(s)
    if s.quantization is None:
        return Row(what, shape.params * DTYPE_BYTES[dtype], f"{count(shape.params)} params in {dtype}")
    q = s.quantization
    # the embeddings, norms and head: float32, as peft's prepare_model_for_kbit_training (which kitae's QLoRA
    # loading calls) casts every weight that is not quantized
    rest = shape.params - shape.quantizable
    size = shape.quantizable * q.bytes_per_weight() + rest * 4
    return Row(what, size, f"{count(shape.params)} params: linear layers {q.bits}-bit {q.type}"
               f"{' (double quant)' if q.double_quant and q.bits == 4 else ''}, the rest in float32")


def count(n: float) -> str:
    """12_960_000_000 -> "12.96B"; 2_000_000 -> "2.0M"."""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def _weight_dtype(s: Setup) -> str:
    from kitae.trainer.setup import precision

    return precision(s.cfg.model, s.cuda).weights


def _compute_bytes(s: Setup) -> int:
    """Bytes of an activation or KV value: the 4-bit layers' compute dtype ("auto": model.dtype), else model.dtype."""
    q = s.quantization
    return DTYPE_BYTES[q.compute_dtype if q and q.compute_dtype != "auto" else s.cfg.model.dtype]


def trained_params(s: Setup) -> tuple[int, int]:
    """(trained parameters, bytes per trained value): a LoRA adapter is float32 (peft keeps adapters of a
    half-precision base in float32); full fine-tuning trains every weight in its weight dtype."""
    lora = s.cfg.model.lora
    if lora is not None:
        return s.shape.lora_params(lora.r, list(lora.target_modules)), 4
    return s.shape.params, DTYPE_BYTES[_weight_dtype(s)]


def sequence_tokens(s: Setup) -> int:
    return s.prompt_tokens + s.cfg.max_completion_tokens


def micro_batch_tokens(s: Setup) -> int:
    """Positions one update forward computes: each row's completion, and its group's prompt once (the samples of
    a group share their prompt: kitae.trainer.batch.packed_micro_batches)."""
    mb, g = s.cfg.optim.micro_batch_size, s.cfg.sampling.group_size
    return mb * s.cfg.max_completion_tokens + -(-mb // g) * s.prompt_tokens


def engine_sequences(s: Setup) -> int:
    """Sequences the in-process engine decodes at once: whole groups, up to ENGINE_BATCH."""
    g = s.cfg.sampling.group_size
    return min(s.cfg.optim.prompts_per_step * g, max(1, ENGINE_BATCH // g) * g)


def trainer_device(s: Setup) -> DevicePlan:
    dev = DevicePlan("trainer", together=bool(s.cfg.sampling.async_) and s.cfg.sampling.engine.in_process)
    dev.rows.append(weights_row(s, s.shape))
    n, each = trained_params(s)
    lora = s.cfg.model.lora
    if lora is not None:
        dev.rows.append(Row("LoRA adapter", n * each, f"rank {lora.r} on {', '.join(lora.target_modules)}: "
                            f"{count(n)} params in float32"))
    dev.rows.append(Row("optimizer state", 2 * n * each, f"AdamW: 2 states per trained param "
                        f"({'float32' if each == 4 else 'weight dtype'})"))
    dev.rows.extend(_reference_rows(s))
    if s.reward_model is not None:
        dev.rows.append(Row("reward model (in process)", s.reward_model.params * DTYPE_BYTES[s.reward_dtype],
                            f"{count(s.reward_model.params)} params in {s.reward_dtype}"))
    dev.rows.append(Row("framework overhead", CUDA_OVERHEAD if s.cuda else CPU_OVERHEAD,
                        "CUDA context, workspaces, allocator" if s.cuda else "tokenizer, run store, data"))
    if s.cfg.sampling.engine.in_process:
        dev.rows.extend(rollout_rows(s))
        if dev.together:
            dev.rows.append(Row("rollout worker's model copy", weights_row(s, s.shape).bytes, "sampling.async",
                                "rollout"))
    dev.rows.extend(update_rows(s, n, each))
    return dev


def _reference_rows(s: Setup) -> list[Row]:
    kl = s.cfg.algorithm.kl
    if kl.coef == 0 and kl.adaptive is None:
        return []
    if s.cfg.model.lora is not None:
        return [Row("reference model", 0, "the base with the adapter disabled: no copy")]
    return [weights_row(s, s.shape, "reference model")]


def rollout_rows(s: Setup) -> list[Row]:
    sh, seqs = s.shape, engine_sequences(s)
    kv = 2 * sh.layers * sh.kv_heads * sh.head_dim * _compute_bytes(s) * seqs * sequence_tokens(s)
    return [Row("KV cache (in-process engine)", kv, f"{seqs} sequences x {sequence_tokens(s)} tokens", "rollout"),
            Row("sampling logits", seqs * sh.vocab * 4 * 3, f"{seqs} x vocab {sh.vocab}, float32", "rollout")]


def update_rows(s: Setup, trained: int, each: int) -> list[Row]:
    sh, mb = s.shape, s.cfg.optim.micro_batch_size
    tokens = micro_batch_tokens(s)
    per_token_layer = (ACT_HIDDEN * sh.hidden + ACT_MLP * sh.intermediate) * _compute_bytes(s)
    if s.cfg.model.gradient_checkpointing:
        act = tokens * (sh.layers * sh.hidden * _compute_bytes(s) + per_token_layer)
        how = f"{mb} rows, {tokens} positions, checkpointed (one layer recomputed at a time)"
    else:
        act = tokens * sh.layers * per_token_layer
        how = f"{mb} rows, {tokens} positions x {sh.layers} layers"
    counted = mb * s.cfg.max_completion_tokens
    positions = min(s.logprob_chunk, counted) if s.logprob_chunk else counted
    chunk = (f"a chunk of {positions} positions" if s.logprob_chunk
             else f"the whole micro-batch's {counted} positions (not chunked)")
    return [Row("gradients", trained * each, "one per trained param", "update"),
            Row("activations", act, how, "update"),
            Row("log-prob logits", positions * sh.vocab * 4 * LOGIT_COPIES, f"{chunk} x vocab {sh.vocab}", "update")]


def server_device(s: Setup) -> DevicePlan:
    """A rollout server's device (vLLM, SGLang, kitae serve model): the weights in the compute dtype and the KV
    cache (vLLM reserves gpu_memory_utilization of the device whatever this says)."""
    dev = DevicePlan("rollout server")
    shape = s.shape
    dev.rows.append(Row("weights", shape.params * _compute_bytes(s), f"{count(shape.params)} params"))
    dev.rows.extend(r for r in rollout_rows(s) if r.what.startswith("KV"))
    dev.rows[-1].what = "KV cache"
    dev.rows.append(Row("framework overhead", CUDA_OVERHEAD if s.cuda else CPU_OVERHEAD))
    return dev


@dataclass
class Plan:
    devices: list[DevicePlan]
    sizes: list[float | None]  # each device's size in bytes (None: not given)
    notes: list[str] = field(default_factory=list)

    def fits(self) -> bool | None:
        """True or False where every device's size is known, else None."""
        if any(size is None for size in self.sizes):
            return None
        return all(d.peak <= size for d, size in zip(self.devices, self.sizes))


def make_plan(s: Setup, sizes: list[float | None] | None = None) -> Plan:
    devices = [trainer_device(s)]
    notes = []
    if s.cfg.sampling.engine.on_servers:
        devices.append(server_device(s))
    for reward in s.cfg.rewards:
        spec = reward.grader or {}
        if spec.get("type") == "reward_model" and spec.get("url"):
            notes.append(f"reward model '{reward.name}' is served at {spec['url']} (kitae serve rm): its memory is "
                         "on that machine's device, not counted here")
    sizes = list(sizes or [])
    if len(sizes) == 1 and len(devices) == 2:
        notes.append("one device size given for a trainer and a rollout server: the server's device is not sized")
    if len(sizes) > len(devices):
        notes.append(f"{len(sizes)} device sizes given, {len(devices)} device(s) used: the rest hold nothing kitae "
                     "plans (a reward model served there, say)")
    sizes = (sizes + [None] * len(devices))[: len(devices)]
    return Plan(devices, sizes, notes)


# ---- making it fit -------------------------------------------------------------------------------------------------
def fixes(s: Setup) -> list[tuple[str, str]]:
    """The settings to try, in order, each on top of the ones before: (--set override, what it does)."""
    cfg, out = s.cfg, []
    if s.quantization is None and cfg.model.lora is not None:
        out.append(("model.quantization={bits: 4, type: nf4, double_quant: true, compute_dtype: bfloat16}",
                    "a 4-bit base"))
    if cfg.model.lora is None:
        out.append(("model.lora={r: 16, alpha: 32}", "train a LoRA adapter, not every weight"))
        out.append(("model.quantization={bits: 4, type: nf4, double_quant: true, compute_dtype: bfloat16}",
                    "a 4-bit base"))
    elif cfg.model.lora.r > 8:
        out.append(("model.lora.r=8", "a smaller adapter rank"))
    if cfg.optim.micro_batch_size > 1:
        out.append(("optim.micro_batch_size=1", "one sequence per forward/backward"))
    if s.logprob_chunk == 0 and hasattr(cfg.optim, "logprob_chunk_size"):  # a kitae with chunked log-probs
        out.append((f"optim.logprob_chunk_size={LOGPROB_CHUNK}", "log-probs a chunk of positions at a time"))
    if not cfg.model.gradient_checkpointing:
        out.append(("model.gradient_checkpointing=true", "recompute activations in the backward"))
    if cfg.optim.prompts_per_step > 1:
        out.append((f"optim.prompts_per_step={cfg.optim.prompts_per_step // 2}", "half the groups decoded at once"))
    if cfg.sampling.group_size > 4:
        out.append(("sampling.group_size=4", "fewer samples per prompt"))
    if cfg.sampling.max_new_tokens > 256:
        out.append((f"sampling.max_new_tokens={cfg.sampling.max_new_tokens // 2}", "shorter completions"))
    return out


def first_fit(config: str | Path, overrides: list[str], sizes: list[float | None], cuda: bool,
              prompt_tokens: int | None = None) -> tuple[list[str], Plan] | None:
    """The settings of :func:`fixes`, tried in order and each on top of the ones before, up to the first after
    which the plan fits, less any earlier one it fits without (None if none fits)."""
    def plan_with(extra: list[str]) -> Plan:
        return make_plan(load_setup(config, [*overrides, *extra], cuda, prompt_tokens), sizes)

    def fits(extra: list[str]) -> bool:
        try:
            return plan_with(extra).fits()
        except ConfigError:  # e.g. a 4-bit base left without the LoRA adapter it needs
            return False

    tried: list[str] = []
    for override, _ in fixes(load_setup(config, overrides, cuda, prompt_tokens)):
        tried.append(override)
        if fits(tried):
            for earlier in tried[:-1]:
                if fits([o for o in tried if o != earlier]):
                    tried.remove(earlier)
            return tried, plan_with(tried)
    return None


def first_fit_hint() -> str:
    return ("the memory plan says this run does not fit its GPU (an estimate: the run goes on); `kitae plan CONFIG "
            "--gpu SIZE` names the settings that would make it fit")


# ---- sizes and the table -------------------------------------------------------------------------------------------
def parse_size(text: str, flag: str = "--gpu") -> float:
    """"32GB", "24GiB", "80G" -> bytes (GB read as GiB, as GPU makers' "32 GB" cards hold 32 GiB)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(g|gb|gib|m|mb|mib)?\s*", text, re.IGNORECASE)
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(flag, f"expected a size such as 32GB or 24GiB, got {text!r}")
    unit = (m.group(2) or "gb").lower()
    return float(m.group(1)) * (GIB if unit.startswith("g") else 1024**2)


def parse_gpus(text: str) -> list[float]:
    """"2x80GB" -> [80 GiB, 80 GiB]; "32GB,16GB" -> [32 GiB, 16 GiB]."""
    m = re.fullmatch(r"\s*(\d+)\s*[x×]\s*(.+)", text)
    if m:
        if int(m.group(1)) < 1:
            raise ConfigError("--gpus", f"expected at least one device, got {text!r}")
        return [parse_size(m.group(2), "--gpus")] * int(m.group(1))
    return [parse_size(part, "--gpus") for part in text.split(",")]


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def format_plan(plan: Plan, concise: bool = False) -> str:
    lines = []
    for dev, size in zip(plan.devices, plan.sizes):
        verdict = "" if size is None else (f" of {gib(size)}: fits" if dev.peak <= size
                                           else f" of {gib(size)}: DOES NOT FIT")
        lines.append(f"{dev.name}: peak {gib(dev.peak)}{verdict}")
        if concise:
            continue
        for row in dev.rows:
            when = {"static": "", "rollout": " [sampling]", "update": " [update]"}[row.phase]
            lines.append(f"  {row.what + when:<40} {gib(row.bytes):>12}  {row.note}")
        rule = "static + sampling + update (async)" if dev.together else "static + max(sampling, update)"
        lines.append(f"  {'peak = ' + rule:<40} {gib(dev.peak):>12}")
    lines.extend(f"note: {n}" for n in plan.notes)
    return "\n".join(lines)

"""A run's parts, built from its config: the accelerator and its precision, the policy (LoRA or full), the
reference model, the optimizer and its
learning-rate schedule, the rollout engine, the prompt sampler, the partial-rollout buffer, the repeat
penalty's reward component, the KL coefficient's controller, and the run store.

Each builder is a function of the config and of the parts built before it; :class:`kitae.trainer.loop.Trainer`
calls them in order (the order matters for the random state: a new LoRA adapter draws its initial weights).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from kitae.algorithms.kl import KL_CONTROLLERS
from kitae.errors import ConfigError
from kitae.models import language_targets, load_causal_lm
from kitae.quantization import quiet_offline_kernel_warnings
from kitae.rewards.graders import RepeatPenalty
from kitae.rollout.base import (ENGINES, BuiltFromConfig, ContinuesTokens, EncodesPrompts, RolloutEngine,
                                SyncsWeights)
from kitae.rollout.partial import PartialRollouts
from kitae.scoring.components import RewardComponent
from kitae.store import RunStore
from kitae.store.lock import RunLock
from kitae.trainer import sharded
from kitae.trainer.config import KLConfig, ModelConfig, OptimConfig, TrainConfig
from kitae.trainer.resume import ResumePlan, trim_and_record_resume, write_config_yaml
from kitae.trainer.samplers import SAMPLERS
from kitae.trainer.update import BASE_UNDER_ADAPTER


# ---- precision and attention ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Precision:
    """How a run holds and computes its weights: ``weights`` is the dtype the policy (and the reference model)
    are loaded in, and so the dtype of the optimizer's state; ``mixed`` is accelerate's ``mixed_precision``
    ("no", "bf16", "fp16"): the forward and backward run under autocast to that dtype."""

    weights: str
    mixed: str


_MIXED = {"bfloat16": "bf16", "float16": "fp16"}


def precision(cfg: ModelConfig, cuda: bool) -> Precision:
    """``model.dtype`` and ``model.master_weights`` on this device.

    ``master_weights: float32`` (``auto`` on CUDA): float32 weights and AdamW state, forward and backward under
    autocast to ``model.dtype`` (accelerate's ``mixed_precision``; fp16 with its loss scaler). ``dtype`` (``auto``
    on CPU, where bf16 autocast only adds casts to matmuls that are slow in bf16 anyway): the weights themselves
    in ``model.dtype``, no autocast (half the memory; AdamW's updates are rounded to that dtype).

    >>> precision(ModelConfig(dtype="bfloat16"), cuda=True)
    Precision(weights='float32', mixed='bf16')
    >>> precision(ModelConfig(dtype="bfloat16"), cuda=False)
    Precision(weights='bfloat16', mixed='no')
    """
    master = cfg.master_weights if cfg.master_weights != "auto" else ("float32" if cuda else "dtype")
    if cfg.dtype == "float32" or master == "dtype":
        return Precision(cfg.dtype, "no")
    return Precision("float32", _MIXED[cfg.dtype])


def attention(cfg: ModelConfig, cuda: bool) -> str | None:
    """The ``attn_implementation`` the model is loaded with: ``model.attn_implementation`` as given, or for
    ``auto`` flash attention 2 on CUDA in bf16/fp16 when the ``flash_attn`` package is installed, else None
    (transformers' default: sdpa where the model supports it, else eager). Flash attention asked for where it
    cannot run is a ConfigError naming why."""
    name = cfg.attn_implementation
    usable = cuda and cfg.dtype != "float32" and importlib.util.find_spec("flash_attn") is not None
    if name == "auto":
        return "flash_attention_2" if usable else None
    if name == "flash_attention_2" and not usable:
        why = ("needs a CUDA device" if not cuda else "needs model.dtype bfloat16 or float16" if cfg.dtype == "float32"
               else "needs the flash_attn package (pip install flash-attn)")
        raise ConfigError("model.attn_implementation", f"flash_attention_2 {why}; use sdpa or auto")
    return name


def make_accelerator(cfg: TrainConfig):
    """The run's accelerator: on CUDA when there is a device, with the mixed precision of :func:`precision`
    (this argument wins over an ``accelerate launch`` config's ``mixed_precision``: ``model.dtype`` is the one
    source of truth)."""
    from accelerate import Accelerator

    cuda = torch.cuda.is_available()
    acc = Accelerator(cpu=not cuda, mixed_precision=precision(cfg.model, cuda).mixed)
    sharded.enable_on_cpu(acc)  # an FSDP launch on CPU processes: FSDP2 over gloo, not data parallel
    return acc


# The reasons kitae's loop cannot run under a launcher's optimizer sharding yet (docs/scale.md).
_SHARDED = {
    "DEEPSPEED": "DeepSpeed steps its optimizer inside each backward (once per micro-batch under kitae's update, "
                 "not once per pass), clips the gradient itself (the non-finite-norm guard cannot skip a step), "
                 "and its ZeRO optimizer's state is split over the processes (a checkpoint would hold one part)",
}


def check_distributed(acc, cfg: TrainConfig | None = None) -> None:
    """Refuse an ``accelerate launch`` setup the GRPO loop would hang in or train wrongly under: DeepSpeed
    (:data:`_SHARDED` says why), FSDP1, and under FSDP2 what kitae.trainer.sharded cannot do. Data parallel
    (DDP, one full copy per process) and FSDP2 are what kitae runs."""
    kind = getattr(acc.distributed_type, "name", str(acc.distributed_type))
    if kind in _SHARDED:
        raise ConfigError("accelerate launch --config_file", f"distributed_type {kind} is not supported by kitae's "
                          f"trainer yet: {_SHARDED[kind]}. Launch with data parallel (distributed_type MULTI_GPU) "
                          "or FSDP2 (examples/accelerate/fsdp2.yaml), and shrink the memory with model.lora, "
                          "model.gradient_checkpointing or a smaller optim.micro_batch_size")
    if kind == "FSDP":
        sharded.check(acc)


# ---- models -----------------------------------------------------------------------------------------------
def load_policy(cfg: ModelConfig, path: str, checkpoint_model: Path | None = None, cuda: bool = False,
                device=None):
    """The model to train: the one at `path` (``model.path`` as pre-flight resolved it: a local folder) or a
    checkpoint's model/, with a LoRA adapter when ``model.lora`` is set (a checkpoint's adapter, else a new one
    on the language model's ``target_modules``). Its weights are in :func:`precision`'s dtype for the device
    (``cuda``: the accelerator's device is a GPU), its attention :func:`attention`'s. With
    ``model.quantization`` the base is loaded in 4 or 8 bits straight onto `device` (the accelerator's) and
    made ready for a LoRA adapter by peft's prepare_model_for_kbit_training (QLoRA)."""
    lora, q = cfg.lora, cfg.quantization
    if q is not None and q.compute_dtype == "auto":  # model.dtype is what the forward computes in (precision)
        q = dataclasses.replace(q, compute_dtype=cfg.dtype)
    folder = checkpoint_model if checkpoint_model is not None and lora is None else path
    where = device if device is not None else ("cuda" if cuda else "cpu")
    model = load_causal_lm(folder, precision(cfg, cuda).weights, where if q is not None else "cpu",
                           attn_implementation=attention(cfg, cuda), quantization=q)
    if lora is not None:
        quiet_offline_kernel_warnings()  # peft imports bitsandbytes
        import peft

        if q is not None:  # layer norms in float32; with checkpointing, the input embeddings' output needs a grad
            model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.gradient_checkpointing)
        if checkpoint_model is not None:
            model = peft.PeftModel.from_pretrained(model, str(checkpoint_model), is_trainable=True)
        else:
            lc = peft.LoraConfig(
                r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                target_modules=language_targets(model, lora_targets(model, lora.target_modules)),
                task_type="CAUSAL_LM",
            )
            model = peft.get_peft_model(model, lc)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.config.use_cache = True
    return model


# Families that fuse attention projections into one layer: the names it replaces -> its name.
FUSED_ATTENTION = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj"}  # Phi-3


def lora_targets(model, names: list[str]) -> list[str]:
    """``model.lora.target_modules`` as this model has them: a name the model lacks becomes its family's fused
    layer (Phi-3's ``qkv_proj`` for q_proj, k_proj, v_proj); ``all-linear`` and patterns stay as given; a name
    neither the model nor that layer has is a ConfigError listing the model's linear layers (peft would leave it
    out silently while another name matches)."""
    linear = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    out = []
    for name in names:
        if name == "all-linear" or not name.isidentifier():  # peft's keyword, a pattern: as given
            out.append(name)
            continue
        name = name if name in linear else FUSED_ATTENTION.get(name, name)
        if name not in linear:
            raise ConfigError("model.lora.target_modules", f"{name!r} is not a linear layer of this model; its "
                              f"linear layers are {', '.join(sorted(linear))}")
        out.append(name)
    return list(dict.fromkeys(out))


def load_reference(cfg: TrainConfig, path: str, device):
    """The KL's reference policy: None when the KL weight is 0 (no reference model), :data:`BASE_UNDER_ADAPTER`
    for LoRA runs, else the starting model, frozen, in eval mode, on `device`, held as the policy is (the same
    weight dtype and attention; its forward runs under the policy's autocast, kitae.trainer.update), so at step 0
    its log-probs are the policy's."""
    kl = cfg.algorithm.kl
    if kl.coef == 0 and kl.adaptive is None:
        return None
    if cfg.model.lora is not None:
        return BASE_UNDER_ADAPTER
    cuda = torch.device(device).type == "cuda"
    ref = load_causal_lm(path, precision(cfg.model, cuda).weights, device,
                         attn_implementation=attention(cfg.model, cuda))
    ref.requires_grad_(False)
    return ref.eval()


# ---- optimizer and learning rate --------------------------------------------------------------------------
def make_optimizer(model, o: OptimConfig) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the trainable parameters, and the schedule lr = optim.lr x :func:`lr_factor`."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, functools.partial(lr_factor, o))


def lr_factor(o: OptimConfig, step: int) -> float:
    """The learning rate's factor after ``step`` scheduler steps (the optimizer step ``step + 1`` uses it):
    linear warm-up from 1/warmup_steps to 1 over ``warmup_steps`` optimizer steps, then constant, linear to 0,
    or half a cosine to 0 at ``optim.steps``.

    Not transformers' ``get_scheduler``: its warm-up is step / warmup_steps, so the first optimizer step would
    run at lr 0 (tests/trainer/test_schedule.py shows both).

    >>> [lr_factor(OptimConfig(steps=6, warmup_steps=2, scheduler="linear"), s) for s in range(7)]
    [0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0]
    """
    if o.warmup_steps and step < o.warmup_steps:
        return (step + 1) / o.warmup_steps
    if o.scheduler == "constant":
        return 1.0
    frac = min(1.0, (step - o.warmup_steps) / max(1, o.steps - o.warmup_steps))
    return 1.0 - frac if o.scheduler == "linear" else 0.5 * (1 + math.cos(math.pi * frac))


def apply_optim_config(optimizer, scheduler, o: OptimConfig) -> None:
    """The config's optimizer settings over restored ones: the same values unless the config changed on resume,
    when a new lr, betas or weight decay (and schedule) take effect from the next step."""
    factor = lr_factor(o, scheduler.last_epoch)  # LambdaLR: lr = base lr * factor(last_epoch)
    for g in optimizer.param_groups:
        g.update(lr=o.lr * factor, initial_lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
    scheduler.base_lrs = [o.lr] * len(optimizer.param_groups)


# ---- sampling ---------------------------------------------------------------------------------------------
def make_engine(cfg: TrainConfig, policy, tokenizer, processor,
                servers: dict | None) -> RolloutEngine:
    """The rollout engine of ``sampling.engine``; one built from the config (kitae.rollout.base.BuiltFromConfig:
    the server engine) gets the sampling settings and the servers pre-flight found answering. A vision-language
    model samples with the engine's image form (kitae.rollout.base.SamplesImages: the in-process engine's). Every
    engine that applies the chat template (EncodesPrompts) gets ``model.chat_template_kwargs`` and
    ``model.end_marker``; either set for one that does not is a ConfigError.
    With ``environment:`` the engine is wrapped in an agent engine (kitae.agents.engine) whose rollouts are
    episodes; it forwards what the wrapped engine can do beyond sampling (weight pushes, stats, state)."""
    name = cfg.sampling.engine.type
    cls = ENGINES.get(name, "sampling.engine")
    if processor is not None:  # a vision-language model: the engine's image form (pre-flight: it has one)
        engine = cls.for_images(policy, tokenizer, processor)
    elif issubclass(cls, BuiltFromConfig):
        engine = cls.from_config(policy, tokenizer, cfg.sampling, cfg.run_dir, servers)
    else:
        engine = cls(policy, tokenizer)
    if isinstance(engine, SyncsWeights):  # a quantized base's weights can be pushed as the settings say
        cfg.sampling.engine.check_push(cfg.model, "sampling")
    if isinstance(engine, EncodesPrompts):
        engine.set_chat(cfg.model.chat_template_kwargs, cfg.model.end_marker)
    else:  # it would sample without them, and say nothing
        for field in ("chat_template_kwargs", "end_marker"):
            if getattr(cfg.model, field):
                raise ConfigError(f"model.{field}", f"the {name} engine does not apply the chat "
                                  "template itself (kitae.rollout.base.EncodesPrompts), so it cannot honour this; "
                                  "leave it out, or give the engine set_chat and encode_prompt")
    if cfg.environment is not None:  # agents: every rollout an episode of turns and tool calls
        if processor is not None:
            raise ConfigError("environment", "episodes of a vision-language model are not sampled yet (image "
                              "prompts sample in one turn); remove the environment section or use a text model")
        from kitae.agents.engine import build_agent_engine

        engine = build_agent_engine(cfg, engine, tokenizer)
    return engine


def make_sampler(cfg: TrainConfig, rows: list[dict]):
    """The prompt sampler of ``data.sampler`` (uniform, prioritized, curriculum) over the training rows."""
    sc = cfg.data.sampler
    cls = SAMPLERS.get(sc.type, "data.sampler.name")
    return cls(len(rows), seed=cfg.seed, shuffle=cfg.data.shuffle, rows=rows, **sc.options())


def make_partial(cfg: TrainConfig, engine: RolloutEngine, tokenizer, num_processes: int) -> PartialRollouts | None:
    """The replay buffer of partial rollouts (``sampling.partial``), or None for whole trajectories."""
    pc = cfg.sampling.partial
    if pc is None:
        return None
    if not isinstance(engine, ContinuesTokens):
        raise ConfigError("sampling.partial", f"the {cfg.sampling.engine.type} engine cannot continue trajectories")
    if num_processes > 1:
        raise ConfigError("sampling.partial", "partial rollouts run in one process for now (the replay buffer "
                          "is not shared between processes)")
    return PartialRollouts(engine, tokenizer, pc.segment_tokens, cfg.sampling.max_new_tokens)


def repeat_component(cfg: TrainConfig) -> list[RewardComponent]:
    """``sampling.repeat.penalty``, when not 0, as a reward component named 'repeat'."""
    rc = cfg.sampling.repeat
    if rc is None or rc.penalty == 0:
        return []
    if any(r.name == "repeat" for r in cfg.rewards):
        raise ConfigError("sampling.repeat.penalty", "adds a reward component named 'repeat'; rename yours")
    return [RewardComponent("repeat", 1.0, RepeatPenalty(rc.penalty))]


# ---- KL and the run store ---------------------------------------------------------------------------------
def make_kl_controller(kl: KLConfig):
    """The KL coefficient's controller (kitae.algorithms.kl.KL_CONTROLLERS): "adaptive" toward
    ``kl.adaptive.target`` when set, else "fixed" at ``kl.coef``."""
    if kl.adaptive is None:
        return KL_CONTROLLERS.get("fixed", "algorithm.kl")(kl.coef)
    return KL_CONTROLLERS.get("adaptive", "algorithm.kl.adaptive")(kl.coef, kl.adaptive.target, kl.adaptive.horizon)


def create_or_trim_store(cfg: TrainConfig, plan: ResumePlan | None, lock: RunLock | None = None) -> RunStore:
    """The run store: a new one (and the run's config.yaml); or on resume the run's own, trimmed to the
    checkpoint's step (the steps logged after it are deleted: they are redone) with the resume recorded.

    ``lock``: the run's lock (kitae.store.lock), taken by the trainer before anything else; the store holds it
    from here on and lets it go when it is closed (also when opening fails)."""
    if plan is not None:
        store = RunStore.open(cfg.run_dir, lock=lock)
        try:
            trim_and_record_resume(store, plan, cfg)
            store.mark_running()
        except BaseException:
            store.close()
            raise
        return store
    store = RunStore.create(cfg.run_dir, name=cfg.name, config=cfg.to_dict(), model=cfg.model.path, lock=lock)
    try:
        write_config_yaml(cfg.run_dir / "config.yaml", cfg.to_dict(), cfg.run_dir)
    except BaseException:
        store.close()
        raise
    return store

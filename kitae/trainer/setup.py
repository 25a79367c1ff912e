"""A run's parts, built from its config: the policy (LoRA or full), the reference model, the optimizer and its
learning-rate schedule, the rollout engine, the prompt sampler, the partial-rollout buffer, the repeat
penalty's reward component, the KL coefficient's controller, and the run store.

Each builder is a function of the config and of the parts built before it; :class:`kitae.trainer.loop.Trainer`
calls them in order (the order matters for the random state: a new LoRA adapter draws its initial weights).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch
import yaml

from kitae.algorithms.kl import KL_CONTROLLERS
from kitae.errors import ConfigError
from kitae.models import language_targets, load_causal_lm
from kitae.rewards.graders import RepeatPenalty
from kitae.rollout.base import ENGINES
from kitae.rollout.partial import PartialRollouts
from kitae.scoring.rewards import RewardComponent
from kitae.store import RunStore
from kitae.trainer.config import PRESETS_IN_CONFIG, KLConfig, ModelConfig, OptimConfig, TrainConfig
from kitae.trainer.resume import ResumePlan, record_resume, write_settings_as_they_ran
from kitae.trainer.samplers import SAMPLERS

# The reference model of a LoRA run: the base model under the adapter, with the adapter switched off.
BASE_UNDER_ADAPTER = "adapter-disabled"


# ---- models -----------------------------------------------------------------------------------------------
def load_policy(cfg: ModelConfig, path: str, checkpoint_model: Path | None = None):
    """The model to train: the one at `path` (``model.path`` as pre-flight resolved it: a local folder) or a
    checkpoint's model/, with a LoRA adapter when ``model.lora`` is set (a checkpoint's adapter, else a new one
    on the language model's ``target_modules``)."""
    lora = cfg.lora
    model = load_causal_lm(checkpoint_model if checkpoint_model is not None and lora is None else path, cfg.dtype)
    if lora is not None:
        import peft

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
    for LoRA runs, else the starting model, frozen, in eval mode."""
    kl = cfg.algorithm.kl
    if kl.coef == 0 and kl.adaptive is None:
        return None
    if cfg.model.lora is not None:
        return BASE_UNDER_ADAPTER
    ref = load_causal_lm(path, cfg.model.dtype).to(device)
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
def make_engine(cfg: TrainConfig, policy, tokenizer, processor, servers: dict | None):
    """The rollout engine of ``sampling.engine``; one with a ``from_config`` (the server engine) gets the sampling
    settings and the servers pre-flight found answering. Vision-language models sample in this process. Every
    engine gets ``model.chat_template_kwargs`` and ``model.end_marker``."""
    cls = ENGINES.get(cfg.sampling.engine, "sampling.engine")
    if processor is not None:  # pre-flight allows only the in-process engine here
        from kitae.rollout.vision import VisionEngine

        engine = VisionEngine(policy, tokenizer, processor)
    elif (build := getattr(cls, "from_config", None)) is not None:
        engine = build(policy, tokenizer, cfg.sampling, cfg.run_dir, servers)
    else:
        engine = cls(policy, tokenizer)
    engine.set_chat(cfg.model.chat_template_kwargs, cfg.model.end_marker)
    return engine


def make_sampler(cfg: TrainConfig, rows: list[dict]):
    """The prompt sampler of ``data.sampler`` (uniform, prioritized, curriculum) over the training rows."""
    sc = cfg.data.sampler
    options = {k: v for k, v in sc.__dict__.items() if k not in ("name", "correct", "pass_threshold")}
    cls = SAMPLERS.get(sc.name, "data.sampler.name")
    return cls(len(rows), seed=cfg.seed, shuffle=cfg.data.shuffle, rows=rows, **options)


def make_partial(cfg: TrainConfig, engine, tokenizer, num_processes: int) -> PartialRollouts | None:
    """The replay buffer of partial rollouts (``sampling.partial``), or None for whole trajectories."""
    pc = cfg.sampling.partial
    if pc is None:
        return None
    if not hasattr(engine, "generate_tokens"):
        raise ConfigError("sampling.partial", f"the {cfg.sampling.engine} engine cannot continue trajectories")
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


def open_store(cfg: TrainConfig, plan: ResumePlan | None) -> RunStore:
    """The run store: a new one (and the run's config.yaml), or the resumed run's, with the resume recorded."""
    if plan is not None:
        write_settings_as_they_ran(cfg.run_dir)  # an older run's saved config: the loss settings it ran with
        store = RunStore.open(cfg.run_dir)
        record_resume(store, plan, cfg)  # trims the steps to redo; records what happened
        store.mark_running()
        return store
    store = RunStore.create(cfg.run_dir, name=cfg.name, config=cfg.to_dict(), model=cfg.model.path)
    store.set_meta(*PRESETS_IN_CONFIG)  # its saved config holds the loss settings that ran
    (cfg.run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))
    return store

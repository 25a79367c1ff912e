"""The trainer under FSDP2 (torch's ``fully_shard``, through ``accelerate launch`` with ``fsdp_version: 2``): every
process holds a shard of the weights, the gradients and AdamW's state, and every forward pass of the policy
gathers each decoder layer's weights from every process (a collective call). What the loop does for that:

- **Sampling and evaluation** (:func:`full_weights`): every process gathers the whole policy once (one all-gather
  per shard group, all processes together), then samples its own share of the prompts alone, as under data
  parallel: the decoding loop's forward passes need no other process, however many tokens each process decodes.
  Evaluation runs on the main process inside the same context. This holds the full weights (not the gradients
  or the optimizer state) on each device while sampling, as TRL's ZeRO-3 generation does.
- **The update** (:func:`passes_short`): every process runs as many forward passes as the process with the most
  micro-batches; the extra ones are the last micro-batch again with its loss times 0 (a gradient of exactly 0).
  Gradient clipping is accelerate's ``clip_grad_norm_`` (the norm of the whole sharded gradient, the same on
  every process), so the non-finite-norm step skip works as under data parallel.
- **Weight pushes** to rollout servers (:func:`full_model_state`): every process takes part in gathering the
  full weights, as for a checkpoint; the main process pushes them (merged, for LoRA) as under data parallel.
- **Checkpoints** (:func:`checkpoint_state`, :func:`load_optimizer_state`): every process takes part in
  gathering the full model and optimizer state (torch.distributed.checkpoint's full state dicts, on the main
  process's CPU), which the main process writes in kitae's checkpoint layout: model/ is ``save_pretrained``'s
  and loads with ``from_pretrained``; state.pt's optimizer is keyed by parameter name, and resumes under FSDP2,
  data parallel or one process.

On a CPU-only machine accelerate 1.15 never turns FSDP on (its state enables FSDP for accelerator devices only:
an FSDP launch becomes plain data parallel over gloo); :func:`enable_on_cpu` turns it on there, which is how
kitae's tests run FSDP2 (2 processes, gloo).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any

from kitae.errors import ConfigError
from kitae.trainer.processes import gather

_LAUNCHER = "accelerate launch --config_file"


def is_fsdp(acc) -> bool:
    return getattr(acc.distributed_type, "name", str(acc.distributed_type)) == "FSDP"


def enable_on_cpu(acc) -> None:
    """An FSDP launch (``ACCELERATE_USE_FSDP``) on CPU processes: the accelerator's state set to FSDP with the
    launcher's plugin (its ``FSDP_*`` settings), where accelerate itself would run data parallel."""
    from accelerate import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true":
        return
    if acc.distributed_type != DistributedType.MULTI_CPU:
        return
    plugin = FullyShardedDataParallelPlugin()
    if acc.mixed_precision != "no":
        plugin.set_mixed_precision(acc.mixed_precision)
    # both states: accelerate copies PartialState's distributed_type into AcceleratorState at every instantiation
    PartialState().distributed_type = DistributedType.FSDP
    acc.state.distributed_type = DistributedType.FSDP
    acc.state.fsdp_plugin = plugin


def check(acc) -> None:
    """What the trainer cannot run under FSDP: FSDP1."""
    if not getattr(acc, "is_fsdp2", False):
        raise ConfigError(_LAUNCHER, "FSDP1 (fsdp_version: 1) is not supported by kitae's trainer: set "
                          "fsdp_version: 2 (examples/accelerate/fsdp2.yaml), torch's fully_shard")


@contextmanager
def full_weights(acc, model):
    """Under FSDP: the whole policy gathered in every process for the duration (every process must enter
    together), its forward passes then local; resharded at the end. Otherwise nothing."""
    if not is_fsdp(acc):
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    shards = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in shards:
        m.unshard()
    resharding = [m for m in shards if _reshards_after_forward(m)]
    for m in resharding:  # a forward must not reshard what the next one would gather again (a collective)
        m.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for m in resharding:
            m.set_reshard_after_forward(True, recurse=False)
        for m in shards:
            m.reshard()


def _reshards_after_forward(module) -> bool:
    """Whether an FSDP2 module frees its gathered weights after each forward (torch keeps no public getter)."""
    group = module._get_fsdp_state()._fsdp_param_group
    return group is not None and group.post_forward_mesh_info is not None


def passes_short(acc, n: int) -> int:
    """How many forward passes fewer than ``n`` the process with the most runs (a collective call under FSDP,
    where every forward needs every process); 0 otherwise."""
    if not is_fsdp(acc):
        return 0
    return max(gather(acc, [n])) - n


def checkpoint_state(acc, model, optimizer) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the model's state dict to save, or None for ``save_pretrained``'s own; the optimizer's). Under FSDP both
    are the full ones, gathered by every process onto the main process's CPU (the others get empty dicts)."""
    if not is_fsdp(acc):
        return None, optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return full_model_state(acc, model), get_optimizer_state_dict(model, optimizer, options=full)


def full_model_state(acc, model) -> dict[str, Any] | None:
    """Under FSDP: the full state dict of ``model`` (a PEFT model's under its own names), gathered by every
    process onto the main process's CPU (the others get an empty dict; every process must call it together);
    what checkpoints save and weight pushes send. Otherwise None (the model's own state dict is full)."""
    if not is_fsdp(acc):
        return None
    weights = acc.get_state_dict(model)  # the full state dict on the main process
    # a tied weight (lm_head = embed_tokens) under its second name: gathered as a copy, which save_pretrained
    # would write as a weight of its own
    policy = acc.unwrap_model(model)
    aliases = {n for n, _ in policy.named_parameters(remove_duplicate=False)} - {n for n, _ in policy.named_parameters()}
    return {k: v for k, v in weights.items() if k not in aliases}


def load_optimizer_state(acc, model, optimizer, state: dict[str, Any]) -> None:
    """A checkpoint's optimizer state into ``optimizer``: one keyed by parameter name (saved under FSDP) or by
    position (saved by data parallel or one process), under FSDP or not."""
    by_name = any(isinstance(p, str) for g in state.get("param_groups", []) for p in g["params"])
    if not is_fsdp(acc):
        optimizer.load_state_dict(_keyed_by_position(acc.unwrap_model(model), state) if by_name else state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    if not by_name:
        state = _keyed_by_name(acc.unwrap_model(model), state)
    set_optimizer_state_dict(model, optimizer, optim_state_dict=state,
                             options=StateDictOptions(full_state_dict=True))


def _keyed_by_name(model, state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state dict keyed by position (``optimizer.state_dict()``: the i-th trainable parameter, as
    kitae.trainer.setup.make_optimizer lists them) keyed by the parameters' names instead."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {names[i]: s for i, s in state["state"].items()}, "param_groups": groups}


def _keyed_by_position(model, state: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`_keyed_by_name`: a state dict keyed by parameter name, keyed by position."""
    index = {n: i for i, n in enumerate(n for n, p in model.named_parameters() if p.requires_grad)}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]]
    return {"state": {index[n]: s for n, s in state["state"].items()}, "param_groups": groups}

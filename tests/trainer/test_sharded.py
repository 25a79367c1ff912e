"""kitae.trainer.sharded in one process: the optimizer state a checkpoint holds, keyed by parameter name (saved
under FSDP2) or by position (saved by data parallel or one process), restores into a plain model's AdamW."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from accelerate.utils import DistributedType

from kitae.trainer.sharded import _keyed_by_name, load_optimizer_state, passes_short
from tests.tiny import tiny_llama

ONE_PROCESS = SimpleNamespace(distributed_type=DistributedType.NO, unwrap_model=lambda m: m, num_processes=1)


def _trained():
    model = tiny_llama(64)
    model.model.layers[0].mlp.up_proj.weight.requires_grad_(False)  # a frozen weight: positions skip it
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    x = torch.randint(0, 64, (2, 6))
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    return model, opt


def _moments(model, opt) -> dict[str, torch.Tensor]:
    return {n: opt.state[p]["exp_avg"] for n, p in model.named_parameters() if p in opt.state}


@pytest.mark.parametrize("saved", ["by position", "by name"])
def test_a_checkpoints_optimizer_state_restores_either_way_it_was_keyed(saved):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    model, opt = _trained()
    state = opt.state_dict() if saved == "by position" else get_optimizer_state_dict(
        model, opt, options=StateDictOptions(full_state_dict=True))
    fresh = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    load_optimizer_state(ONE_PROCESS, model, fresh, state)
    want, got = _moments(model, opt), _moments(model, fresh)
    assert sorted(got) == sorted(want) and len(want) == 19  # 20 weights, one frozen
    assert all(torch.equal(got[n], want[n]) for n in want)
    assert all(float(fresh.state[p]["step"]) == 1.0 for p in fresh.state)


def test_positions_become_the_names_torch_distributed_checkpoint_gives():
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    model, opt = _trained()
    named = _keyed_by_name(model, opt.state_dict())
    dcp = get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    assert named["param_groups"][0]["params"] == dcp["param_groups"][0]["params"]
    assert sorted(named["state"]) == sorted(dcp["state"])
    assert "model.layers.0.mlp.up_proj.weight" not in named["state"]  # the frozen one has no state


def test_no_padding_passes_outside_fsdp():
    assert passes_short(ONE_PROCESS, 3) == 0

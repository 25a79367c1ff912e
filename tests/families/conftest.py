"""Each family's tiny model saved in a folder (session-wide), and a hook that makes a model say chosen tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.families.families import BY_NAME, FAMILIES

NAMES = [f.name for f in FAMILIES]


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory) -> dict[str, Path]:
    """{family name: folder with its model, tokenizer and generation config, and a train.jsonl beside it}."""
    root = tmp_path_factory.mktemp("families")
    rows = [{"messages": [{"role": "user", "content": f"what is {a}+{b}?"}], "reference_answer": str(a + b)}
            for a in range(3) for b in range(3)]
    out = {}
    for f in FAMILIES:
        folder = f.save(root / f.name / "model")
        (root / f.name / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        out[f.name] = folder
    return out


@pytest.fixture(params=NAMES)
def family(request, family_dirs):
    """(Family, its model folder), once per family."""
    return BY_NAME[request.param], family_dirs[request.param]


class Say:
    """A forward hook on the output layer: the i-th forward pass (prefill, then one per new token) puts all the
    probability on ``tokens[i]`` (the last one from then on), so greedy and sampled decoding say exactly them."""

    def __init__(self, model, tokens: list[int]):
        self.tokens, self.calls = tokens, 0
        self.handle = model.get_output_embeddings().register_forward_hook(self)

    def __call__(self, _module, _inputs, logits):
        tok = self.tokens[min(self.calls, len(self.tokens) - 1)]
        self.calls += 1
        forced = torch.full_like(logits, -1e4)
        forced[..., tok] = 0.0
        return forced

    def remove(self) -> None:
        self.handle.remove()

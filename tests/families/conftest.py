"""Each family's tiny model saved in a folder (session-wide); tests/families/say.py makes a model say chosen tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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

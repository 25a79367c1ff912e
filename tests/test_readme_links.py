"""The README's links within the page and to docs/ land somewhere, and its "your own model and data" config reads."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from kitae.trainer.config import from_dict, TrainConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_anchor_in_the_readme_is_a_heading():
    anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", README, flags=re.M)}
    linked = set(re.findall(r"\]\(#([^)]+)\)", README))
    assert linked and linked <= anchors, linked - anchors


def test_every_docs_link_in_the_readme_exists():
    for target in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (ROOT / target).exists(), target


def test_the_own_model_and_data_example_is_a_valid_config():
    section = README.split("## Your own model and data", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1)
    cfg = from_dict(TrainConfig, yaml.safe_load(block))
    assert cfg.model.path == "Qwen/Qwen2.5-0.5B-Instruct" and cfg.data.train.hub == "openai/gsm8k"
    assert cfg.data.rowmap().apply({"question": "q", "answer": "…\n#### 18"}, "x", 1)["reference_answer"] == "18"

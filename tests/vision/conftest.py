"""The bundled vision-language model loaded once per session, and the bundled image prompts (pictures drawn for
a test: tests/vision/pictures.py)."""

from __future__ import annotations

import pytest

from kitae.models import BUNDLED_VL


@pytest.fixture(scope="session")
def vl_engine():
    """kitae-tiny-vl in the rollout engine, one thread (the same numbers on any machine)."""
    if not (BUNDLED_VL / "config.json").is_file():
        pytest.fail("the bundled kitae-tiny-vl is missing; build it with python scripts/build_vision_model.py")
    from kitae.rollout.vision import VisionEngine

    return VisionEngine.from_pretrained("kitae-tiny-vl")


@pytest.fixture(scope="session")
def vision_rows():
    from kitae.data.loader import load_prompts
    from kitae.trainer.config import resolve_data_path

    return load_prompts(resolve_data_path("bundled:vision/test"))

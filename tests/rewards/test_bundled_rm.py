"""The bundled kitae-tiny-rm: small, documented, and it prefers well-formed answers (held-out questions)."""

from __future__ import annotations

import json
import re

import pytest

from kitae.models import BUNDLED_MODEL, BUNDLED_RM
from kitae.rewards.reward_model import LocalRewardModel

pytestmark = pytest.mark.skipif(not (BUNDLED_RM / "config.json").exists(),
                                reason="kitae-tiny-rm is not built (python scripts/build_reward_model.py)")


def test_is_small_and_has_a_card_with_its_accuracy():
    size = sum(f.stat().st_size for f in BUNDLED_RM.iterdir())
    assert size < 10 * 2**20
    card = (BUNDLED_RM / "README.md").read_text(encoding="utf-8")
    accuracy = float(re.search(r"test split \(questions disjoint from training\): \*\*([0-9.]+)\*\*", card).group(1))
    assert 0.5 < accuracy <= 1.0


def test_prefers_a_well_formed_answer_on_a_held_out_question():
    rm = LocalRewardModel(BUNDLED_RM)
    user = {"role": "user", "content": "40+26はいくつですか？"}  # a test-split question
    good = rm.score([[user, {"role": "assistant", "content": "答えは66です。"}]])[0]
    prompt = "<|im_start|>user\n40+26はいくつですか？<|im_end|>\n<|im_start|>assistant\n"
    bad = rm.score_texts([
        prompt + "66です。" * 6,  # loop, unterminated
        prompt + "答えは66です。よい質問ですね。確認してみましょう。がんばりましょう。<|im_end|>\n",  # ramble
        prompt + "<|im_end|>\n",  # empty
    ])
    assert all(good > b for b in bad)


def test_uses_the_bundled_base_tokenizer():
    if not (BUNDLED_MODEL / "tokenizer.json").exists():
        pytest.skip("kitae-tiny-base is not built yet")
    base = json.loads((BUNDLED_MODEL / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    rm = json.loads((BUNDLED_RM / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    assert rm["vocab"] == base["vocab"] and rm["merges"] == base["merges"], (
        "kitae-tiny-rm was built with another tokenizer: rebuild it with `python scripts/build_reward_model.py`")

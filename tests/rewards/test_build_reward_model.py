"""scripts/build_reward_model.py: its preference pairs agree with the rule-based rewards; a short build runs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from kitae.chat import IM_END
from kitae.graders.answer_match import answers_match
from kitae.rewards.repetition import repetition_rate
from kitae.rewards.chat_template import template_violation

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_reward_model.py"
spec = importlib.util.spec_from_file_location("build_reward_model", SCRIPT)
build = importlib.util.module_from_spec(spec)
sys.modules.setdefault("build_reward_model", build)  # dataclasses look their module up by name
spec.loader.exec_module(build)

ROWS = [
    {"messages": [{"role": "system", "content": "簡潔に"}, {"role": "user", "content": "12+35は？"}],
     "reference_answer": "47", "difficulty": "hard", "lang": "ja"},
    {"messages": [{"role": "user", "content": "What is 7-3?"}], "reference_answer": "4", "difficulty": "easy",
     "lang": "en"},
    {"messages": [{"role": "user", "content": "What is the capital of Japan?"}], "reference_answer": "Tokyo",
     "difficulty": "fact", "lang": "en"},
    {"messages": [{"role": "user", "content": "What is the capital of France?"}], "reference_answer": "Paris",
     "difficulty": "fact", "lang": "en"},
]


def answer_of(text: str) -> str:
    return text.split("<|im_start|>assistant\n", 1)[1]


@pytest.fixture(scope="module")
def pairs():
    return build.make_pairs(ROWS, seed=0)


def test_one_pair_per_row_and_kind(pairs):
    assert len(pairs) == len(ROWS) * 5
    assert [k for _, _, k in pairs[:5]] == ["wrong_number", "ramble", "loop", "unterminated", "empty"]
    assert [k for _, _, k in pairs[10:15]] == ["wrong_fact", "ramble", "loop", "unterminated", "empty"]
    assert all("簡潔に" not in c for c, _, _ in pairs)  # system turns are dropped, as the grader does


def test_wrong_answers_keep_the_chosen_phrasing(pairs):
    rows = [r for r in ROWS for _ in range(5)]
    for (chosen, rejected, label), row in zip(pairs, rows):
        if not label.startswith("wrong"):
            continue
        ref, end = row["reference_answer"], IM_END + "\n"
        good, bad = answer_of(chosen).removesuffix(end), answer_of(rejected).removesuffix(end)
        phrasings = [t.split("{x}") for t in build.ANSWER_TEMPLATES[row["lang"]]]
        (pre, post), = [(p, q) for p, q in phrasings if good == p + ref + q and bad.startswith(p) and bad.endswith(q)
                        and bad != good][:1]
        assert bad[len(pre) : len(bad) - len(post)] not in ("", ref)


def test_more_wrong_pairs_per_row():
    labels = [k for _, _, k in build.make_pairs(ROWS[:1], seed=0, wrong_per_row=3)]
    assert labels == ["wrong_number"] * 3 + ["ramble", "loop", "unterminated", "empty"]


def test_chosen_answers_are_compliant_and_correct(pairs):
    for (chosen, _, _), row in zip(pairs, [r for r in ROWS for _ in range(5)]):
        assert template_violation(answer_of(chosen)) is None
        assert answers_match(answer_of(chosen), row["reference_answer"])


@pytest.mark.parametrize("index", range(len(ROWS)))
def test_rejected_answers_are_what_their_kind_says(pairs, index):
    ref = ROWS[index]["reference_answer"]
    got = {kind.split("_")[0]: answer_of(rejected) for _, rejected, kind in pairs[5 * index : 5 * index + 5]}
    assert template_violation(got["wrong"]) is None and not answers_match(got["wrong"], ref)
    assert template_violation(got["ramble"]) is None and ref in got["ramble"]  # correct, then filler
    assert len(got["ramble"]) > 40
    assert template_violation(got["loop"]) == f"no end marker {IM_END}" and repetition_rate(got["loop"], 6) >= 1
    assert template_violation(got["unterminated"]) is not None
    assert template_violation(got["empty"]) == "empty answer"


def test_a_short_build_saves_a_loadable_model_with_a_card(tmp_path):
    from kitae.rewards.reward_model import LocalRewardModel
    from tests.tiny import tiny_tokenizer

    tiny_tokenizer().save_pretrained(tmp_path / "base")
    (tmp_path / "data").mkdir()
    for split in ("train", "test"):
        (tmp_path / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    result = build.main(["--base", str(tmp_path / "base"), "--data", str(tmp_path / "data"), "--out",
                         str(tmp_path / "rm"), "--init", "scratch", "--hidden-size", "32", "--steps", "3",
                         "--batch-pairs", "4", "--threads", "1"])
    assert result["pairs"] == 20 and set(result["by_kind"]) == set(build.LABELS)
    card = (tmp_path / "rm" / "README.md").read_text()
    assert f"**{result['accuracy']:.3f}**" in card
    rm = LocalRewardModel(tmp_path / "rm")
    assert len(rm.score([[{"role": "user", "content": "12+35は？"}, {"role": "assistant", "content": "47"}]])) == 1


def test_loss_is_bradley_terry_plus_centring():
    import math

    import torch

    rc, rr = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 0.0])
    # pair 1: -log σ(2) + 0.1 × 4; pair 2: -log σ(0) + 0 = log 2
    expected = ((math.log(1 + math.exp(-2)) + 0.4) + math.log(2)) / 2
    assert build.pair_loss(rc, rr, center_coef=0.1).item() == pytest.approx(expected, rel=1e-6)

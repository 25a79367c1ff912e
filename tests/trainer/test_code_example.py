"""examples/code.yaml: code RL a user can run on the bundled code model, rewarded and evaluated by the `code` grader
(each sampled program run in the sandbox on the prompt's stdin/stdout test cases)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from kitae.models import BUNDLED_CODE, resolve_model_path
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from kitae.trainer.preflight import model_context, preflight, prompt_encoder

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "code.yaml"
CASES = re.compile(r"^[0-4]/4 cases passed")  # what the code grader says of a program it ran on 4 cases


def test_the_code_example_trains_the_code_model_on_code_and_every_prompt_fits():
    cfg = load_train_config(EXAMPLE)
    assert resolve_model_path(cfg.model.path) == str(BUNDLED_CODE)
    assert [r.grader["type"] for r in cfg.rewards] == ["code"] and cfg.eval.grader["type"] == "code"
    checked = preflight(cfg, EXAMPLE.parent)  # a prompt that does not fit the context raises DataError here
    try:
        assert len(checked.train_rows) == 200 and len(checked.eval_rows) == 100
        encode = prompt_encoder(cfg.sampling.engine.type, checked.tokenizer)  # as the rollout engine encodes a prompt
        longest = max(len(encode(r["messages"])) for r in checked.train_rows + checked.eval_rows)
        assert 20 < longest and longest + cfg.sampling.max_new_tokens <= model_context(checked.model_path) == 192
        train = {r["messages"][-1]["content"] for r in checked.train_rows}
        assert not train & {r["messages"][-1]["content"] for r in checked.eval_rows}  # held out
        assert all(len(r["tests"]) == 4 for r in checked.train_rows + checked.eval_rows)
    finally:
        checked.close()


@pytest.mark.slow
def test_two_steps_of_the_code_example_grade_real_programs_and_evaluate_with_the_code_grader(tmp_path):
    cfg = load_train_config(EXAMPLE, [f"output_dir={tmp_path}", "optim.steps=2", "optim.prompts_per_step=2",
                                      "sampling.group_size=4", "eval.limit=4", "eval.k=1", "logging.save_every=0"])
    summary = Trainer(cfg).train()
    assert summary["status"] == "finished" and summary["steps"] == 2
    con = sqlite3.connect(tmp_path / "code" / "run.db")
    try:
        samples = [(json.loads(s), json.loads(r)) for s, r in con.execute("SELECT scores, reasons FROM samples")]
        evals = [json.loads(m) for (m,) in con.execute("SELECT metrics FROM evals ORDER BY step")]
        eval_scores = [json.loads(d)["score"] for (d,) in con.execute("SELECT data FROM eval_samples")]
    finally:
        con.close()
    assert len(samples) == 2 * 2 * 4
    for scores, reasons in samples:  # every program ran on the 4 cases: no abstention, a fraction passed
        assert scores["correct"] in (0.0, 0.25, 0.5, 0.75, 1.0), (scores, reasons)
        assert CASES.match(reasons["correct"] or "") or scores["correct"] == 0.0, reasons
    assert any(CASES.match(r["correct"] or "") for _, r in samples)  # programs, not only syntax errors
    # evaluated before and after, by the code grader: answer matching would abstain on every sample (these rows
    # have tests, no reference answer)
    assert len(evals) == 2 and all(e["abstain_rate"] == 0.0 for e in evals)
    assert len(eval_scores) == 2 * 4 and all(s in (0.0, 0.25, 0.5, 0.75, 1.0) for s in eval_scores)

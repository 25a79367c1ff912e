"""difficulty and hackable with a tiny real model: pass rates by hand, seeds, resume, report, errors."""

from __future__ import annotations

import json

import pytest

from kitae.config import from_dict
from kitae.curate.difficulty import DifficultyConfig, run_difficulty
from kitae.curate.hackable import INSTRUCTION_EN, INSTRUCTION_JA, HackableConfig, guess_messages, run_hackable
from kitae.curate.sampling import HEADER_KEY
from kitae.curate.step import Context
from kitae.curate.text import prompt_key
from kitae.errors import ConfigError, DataError
from tests.curate import tiny_task

SHORT = {"max_new_tokens": 6, "batch_prompts": 1}


def difficulty(rows, tmp_path=None, engines=None, restart=False, **cfg):
    ctx = Context(out=None if tmp_path is None else tmp_path / "difficulty.jsonl",
                  engines=engines or tiny_task.engines(), restart=restart)
    return run_difficulty(rows, from_dict(DifficultyConfig, {**SHORT, **cfg}), ctx), ctx


def test_greedy_pass_rates_by_hand():
    # greedy: every sample is the taught answer: 47 (right) for the first prompt, hello (not "world") for the second
    result, _ = difficulty(tiny_task.rows(), temperature=0.0, n=3)
    assert [r["pass_rate"] for r in result.rows] == [1.0, 0.0]
    assert result.report.stats["passes 3/3"] == 1 and result.report.stats["passes 0/3"] == 1
    solved, _ = difficulty(tiny_task.rows(), temperature=0.0, n=3, drop_solved=True)
    unsolved, _ = difficulty(tiny_task.rows(), temperature=0.0, n=3, drop_unsolved=True)
    assert [r["reference_answer"] for r in solved.rows] == ["world"]
    assert [d.reason for d in solved.dropped] == ["always solved"]
    assert [r["reference_answer"] for r in unsolved.rows] == ["47"]


def test_same_seed_same_result_other_seed_other_samples(tmp_path):
    rows = tiny_task.rows() * 2
    a, ctx_a = difficulty(rows, tmp_path / "a", n=10, temperature=1.0, seed=3)
    b, ctx_b = difficulty(rows, tmp_path / "b", n=10, temperature=1.0, seed=3)
    c, ctx_c = difficulty(rows, tmp_path / "c", n=10, temperature=1.0, seed=4)
    assert [r["pass_rate"] for r in a.rows] == [r["pass_rate"] for r in b.rows]
    def samples(ctx):
        return [json.loads(x)["texts"] for x in ctx.sidecar("progress.jsonl").read_text().splitlines()[1:]]

    assert samples(ctx_a) == samples(ctx_b)
    assert samples(ctx_a) != samples(ctx_c)
    assert 0.0 < a.rows[0]["pass_rate"] <= 1.0  # sampling strays from the taught answer only sometimes


def test_resume_redoes_only_missing_prompts_and_matches_a_full_run(tmp_path):
    rows = tiny_task.rows() * 2  # 4 prompts, one per batch
    full, ctx = difficulty(rows, tmp_path / "full", n=4, temperature=1.0, seed=0)
    progress = ctx.sidecar("progress.jsonl")
    lines = progress.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5 and HEADER_KEY in json.loads(lines[0])
    # a run killed while writing its third record: header, two records, half a line
    part = tmp_path / "part"
    part.mkdir()
    (part / "difficulty.progress.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:25], encoding="utf-8")
    engines = tiny_task.engines()
    resumed, _ = difficulty(rows, part, engines=engines, n=4, temperature=1.0, seed=0)
    assert engines["None|float32|cpu"].prompts_sampled == 2  # prompts 3 and 4 only
    assert [r["pass_rate"] for r in resumed.rows] == [r["pass_rate"] for r in full.rows]
    assert (part / "difficulty.progress.jsonl").read_text(encoding="utf-8") == progress.read_text(encoding="utf-8")
    again, _ = difficulty(rows, part, engines=engines, n=4, temperature=1.0, seed=0)
    assert engines["None|float32|cpu"].prompts_sampled == 2  # all done: nothing sampled


def write_progress(path, rows, passes, n, settings):
    records = [{"i": i, "key": prompt_key(r), "passes": p, "graded": n, "scores": [1.0] * p + [0.0] * (n - p),
                "texts": ["x"] * n} for i, (r, p) in enumerate(zip(rows, passes))]
    path.write_text("\n".join(json.dumps(x) for x in [{HEADER_KEY: settings}] + records) + "\n", encoding="utf-8")


def test_report_from_recorded_results(tmp_path):
    """Results already in the progress file: nothing is sampled, the report is the hand-made numbers."""
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}], "reference_answer": "1", "difficulty": d}
            for i, d in enumerate(["easy", "easy", "hard", "hard", "hard"])]
    cfg = from_dict(DifficultyConfig, {"n": 4})
    from kitae.curate.difficulty import settings

    write_progress(tmp_path / "difficulty.progress.jsonl", rows, [4, 3, 1, 0, 0], 4, settings(cfg, "difficulty"))
    engines = tiny_task.engines()
    result = run_difficulty(rows, cfg, Context(out=tmp_path / "difficulty.jsonl", engines=engines))
    assert engines["None|float32|cpu"].prompts_sampled == 0
    assert [r["pass_rate"] for r in result.rows] == [1.0, 0.75, 0.25, 0.0, 0.0]
    hist = {row[0]: row[1] for row in result.report.tables[0].rows}
    assert hist == {"0/4": 2, "1/4": 1, "2/4": 0, "3/4": 1, "4/4": 1}
    by_diff = {row[0]: row[1:] for row in result.report.tables[1].rows}
    assert by_diff == {"easy": [2, 0.875, 1, 0], "hard": [3, 0.25 / 3, 0, 2]}
    assert result.report.stats["mean pass rate"] == pytest.approx(0.4)


def test_progress_file_from_other_settings_or_rows(tmp_path):
    rows = tiny_task.rows()
    difficulty(rows, tmp_path, n=2, temperature=0.0)
    with pytest.raises(ConfigError, match=r"other settings \(n: 2 -> 3\).*--restart"):
        difficulty(rows, tmp_path, n=3, temperature=0.0)
    with pytest.raises(DataError, match="input changed"):
        difficulty(list(reversed(rows)), tmp_path, n=2, temperature=0.0)
    result, _ = difficulty(rows, tmp_path, n=3, temperature=0.0, restart=True)
    assert [r["pass_rate"] for r in result.rows] == [1.0, 0.0]


def test_missing_reference_is_a_data_error():
    rows = tiny_task.rows() + [{"messages": [{"role": "user", "content": "hi"}]}]
    with pytest.raises(DataError, match=r"row 3, field 'reference_answer'"):
        difficulty(rows)


@pytest.mark.parametrize("row, content", [
    ({"messages": [{"role": "user", "content": "What is 2+2?"}]}, "What is 2+2?\n\n" + INSTRUCTION_EN),
    ({"messages": [{"role": "user", "content": "2+2は？"}]}, "2+2は？\n" + INSTRUCTION_JA),          # detected
    ({"messages": [{"role": "user", "content": "2+2?"}], "lang": "ja"}, "2+2?\n" + INSTRUCTION_JA),  # the field wins
])
def test_guess_instruction(row, content):
    msgs = guess_messages(row, HackableConfig())
    assert msgs[-1]["content"] == content
    assert row["messages"][-1]["content"] != content  # the row itself is not changed


def test_hackable_tags_and_drops(tmp_path):
    """Recorded guesses (hits 3/8, 1/8, 0/8), min_hits 2: the first prompt is guessable."""
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}], "reference_answer": "1"} for i in range(3)]
    cfg = from_dict(HackableConfig, {"min_hits": 2})
    from kitae.curate.difficulty import settings

    progress = tmp_path / "hackable.progress.jsonl"
    extra = {"instruction_en": cfg.instruction_en, "instruction_ja": cfg.instruction_ja}
    write_progress(progress, rows, [3, 1, 0], 8, settings(cfg, "hackable", **extra))
    ctx = Context(out=tmp_path / "hackable.jsonl", engines=tiny_task.engines())
    tagged = run_hackable(rows, cfg, ctx)
    assert [(r["guessable"], r["guess_rate"]) for r in tagged.rows] == [(True, 0.375), (False, 0.125), (False, 0.0)]
    assert dict(tagged.report.tagged) == {"guessable": 1}
    cfg.drop = True
    dropped = run_hackable(rows, cfg, ctx)
    assert [r["messages"][0]["content"] for r in dropped.rows] == ["q1", "q2"]
    assert (dropped.dropped[0].reason, dropped.dropped[0].detail["hits"]) == ("guessable", 3)
    assert ctx.engines["None|float32|cpu"].prompts_sampled == 0


def test_hackable_samples_with_the_instruction(tmp_path):
    ctx = Context(out=tmp_path / "hackable.jsonl", engines=tiny_task.engines())
    result = run_hackable(tiny_task.rows(), from_dict(HackableConfig, {"max_new_tokens": 4, "n": 2}), ctx)
    assert all(set(r) >= {"guess_rate", "guessable"} for r in result.rows)
    records = [json.loads(x) for x in ctx.sidecar("progress.jsonl").read_text().splitlines()[1:]]
    assert [len(r["texts"]) for r in records] == [2, 2]
    assert ctx.engines["None|float32|cpu"].prompts_sampled == 2


def test_hackable_examples_show_the_guess_that_passed_without_cut_bytes(tmp_path):
    """A guessable prompt's example is the guess that passed, not the first one; a guess the token limit cut
    inside a character's bytes is shown without the U+FFFD that decoding left at its end."""
    rows = [{"messages": [{"role": "user", "content": "日本の首都は？"}], "reference_answer": "東京"}]
    cfg = from_dict(HackableConfig, {"n": 3})
    from kitae.curate.difficulty import settings

    record = {"i": 0, "key": prompt_key(rows[0]), "passes": 1, "graded": 3, "scores": [0.0, 1.0, 0.0],
              "texts": ["大阪です。大阪\ufffd", "東京\ufffd\ufffd", "京都"]}
    extra = {"instruction_en": cfg.instruction_en, "instruction_ja": cfg.instruction_ja}
    (tmp_path / "hackable.progress.jsonl").write_text(
        "\n".join(json.dumps(x) for x in [{HEADER_KEY: settings(cfg, "hackable", **extra)}, record]) + "\n")
    result = run_hackable(rows, cfg, Context(out=tmp_path / "hackable.jsonl", engines=tiny_task.engines()))
    [example] = result.report.examples
    assert example["sample"] == "東京" and example["passes"] == "1/3"
    assert "\ufffd" not in result.report.render()

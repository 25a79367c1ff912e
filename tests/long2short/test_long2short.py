"""long2short: selection rules by hand, weight averaging (LoRA merged first), the comparison table, and the
CLI end to end on a tiny real model (eval, merge, shortest, dpo-pairs, TRL SFT and DPO)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from kitae.cli.main import app
from kitae.graders.answer_match import answers_match
from kitae.errors import ConfigError, KitaeError
from kitae.long2short.compare import ModelReport, efficiency_plot, format_table, mark_frontier, parse_model_arg, unique_names
from kitae.long2short.merge import average_state_dicts, merge_models, normalize_weights
from kitae.long2short.selection import dpo_rows, group_results, rejected_for, sft_rows, shortest_correct
from kitae.models import load_causal_lm
from tests.tiny import tiny_llama, tiny_tokenizer

runner = CliRunner()
MSG = [{"role": "user", "content": "1+1?"}]


def _s(tokens: int, passed: bool, compliant: bool = True, text: str | None = None) -> dict:
    return {"completion_tokens": tokens, "passed": passed, "compliant": compliant, "messages": MSG,
            "output_text": text or f"{'x' * tokens}<|im_end|>", "reference_answer": "2"}


# ---- selection ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "group, expected",
    [
        ([_s(9, True), _s(4, True), _s(6, True)], 1),  # fewest tokens
        ([_s(5, True), _s(5, True)], 0),  # first on a tie
        ([_s(3, True, compliant=False), _s(7, True)], 1),  # correct but cut off / run-on: not a target
        ([_s(2, False), _s(3, False)], None),  # nothing correct: no row
    ],
)
def test_shortest_correct(group, expected):
    got = shortest_correct(group)
    assert (got is None) if expected is None else (got is group[expected])


@pytest.mark.parametrize(
    "tokens_correct, chosen, ratio, expected",
    [
        # (tokens, correct) per sample; expected: (index, kind) longest first
        ([(10, True), (12, False), (8, False), (14, True), (15, True)], 0, 1.5, [(4, "long"), (1, "wrong")]),
        ([(10, True), (10, False), (11, False)], 0, 1.5, [(2, "wrong")]),  # wrong must be strictly longer
        ([(4, True), (6, True), (5, True)], 0, 1.5, [(1, "long")]),  # 6 >= 1.5 x 4, 5 is not
        ([(4, True), (6, True)], 0, 2.0, []),
    ],
)
def test_rejected_for(tokens_correct, chosen, ratio, expected):
    g = [_s(n, ok) for n, ok in tokens_correct]
    assert [(g.index(s), kind) for s, kind in rejected_for(g, g[chosen], ratio)] == expected


def test_sft_and_dpo_rows_are_trl_conversational_rows():
    g = [_s(12, False, text="12+35=46... no<|im_end|>"), _s(3, True, text="47<|im_end|>"),
         _s(9, True, text="47, since 12+35=47<|im_end|>"), _s(30, False, False, "47 47 47<|im_start|>user")]
    [sft] = sft_rows([g, [_s(2, False)]])
    assert sft["prompt"] == MSG and sft["completion"] == [{"role": "assistant", "content": "47"}]
    assert sft["correct_of_n"] == "2/4" and sft["completion_tokens"] == 3
    pairs = dpo_rows([g], ratio=1.5)
    assert [(p["rejected"][0]["content"], p["rejected_kind"]) for p in pairs] == [
        ("47 47 47", "wrong"), ("12+35=46... no", "wrong"), ("47, since 12+35=47", "long")]
    assert all(p["chosen"] == [{"role": "assistant", "content": "47"}] for p in pairs)
    assert len(dpo_rows([g], max_pairs=1)) == 1


# ---- merging --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "weights, expected",
    [(None, [0.5, 0.5]), ([1, 3], [0.25, 0.75]), ([2, 0], [1.0, 0.0])],
)
def test_normalize_weights(weights, expected):
    assert normalize_weights(weights, 2) == expected


@pytest.mark.parametrize("weights, message", [([1], "one weight per model"), ([1, -1], "must be >= 0"),
                                              ([0, 0], "positive sum")])
def test_bad_weights(weights, message):
    with pytest.raises(ConfigError, match=message):
        normalize_weights(weights, 2)


def test_average_state_dicts_by_hand():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor([3])}
    b = {"w": torch.tensor([5.0, -2.0]), "n": torch.tensor([9])}
    out = average_state_dicts([a, b], [0.75, 0.25], ["a", "b"])
    assert out["w"].tolist() == [2.0, 1.0] and out["n"].tolist() == [3]  # integers are copied from the first
    with pytest.raises(KitaeError, match="w has shape"):
        average_state_dicts([a, {"w": torch.zeros(3), "n": b["n"]}], [0.5, 0.5], ["a", "b"])


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    tok = tiny_tokenizer()
    for name, seed in (("a", 0), ("b", 1)):
        tiny_llama(len(tok), seed=seed).save_pretrained(root / name)
        tok.save_pretrained(root / name)
    return root


def test_merge_averages_weights_and_merges_a_lora_adapter_first(two_models, tmp_path):
    import peft

    a, b = load_causal_lm(two_models / "a"), load_causal_lm(two_models / "b")
    merge_models([str(two_models / "a"), str(two_models / "b")], tmp_path / "ab", [3, 1])
    m = load_causal_lm(tmp_path / "ab")
    key = "model.layers.0.self_attn.q_proj.weight"
    assert torch.allclose(m.state_dict()[key], 0.75 * a.state_dict()[key] + 0.25 * b.state_dict()[key], atol=1e-6)
    assert json.loads((tmp_path / "ab" / "merge.json").read_text())["weights"] == [0.75, 0.25]

    cfg = peft.LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)  # a non-zero update
    torch.manual_seed(0)
    adapted = peft.get_peft_model(load_causal_lm(two_models / "a"), cfg)
    adapted.save_pretrained(tmp_path / "adapter")
    full = adapted.merge_and_unload().state_dict()[key]
    assert not torch.allclose(full, a.state_dict()[key])
    merge_models([str(tmp_path / "adapter"), str(two_models / "b")], tmp_path / "lora", base=str(two_models / "a"))
    got = load_causal_lm(tmp_path / "lora").state_dict()[key]
    assert torch.allclose(got, 0.5 * full + 0.5 * b.state_dict()[key], atol=1e-6)


def test_merge_refuses_different_architectures(two_models, tmp_path):
    tok = tiny_tokenizer()
    tiny_llama(len(tok), hidden=48).save_pretrained(tmp_path / "wide")
    with pytest.raises(KitaeError, match="cannot merge"):
        merge_models([str(two_models / "a"), str(tmp_path / "wide")], tmp_path / "out")


# ---- comparison -----------------------------------------------------------------------------------------
def _report(name, score, tokens):
    return ModelReport(name, name, {"pass@1": score, "len_mean": tokens})


def test_frontier_and_plot():
    reports = [_report("long", 0.8, 100), _report("merged", 0.7, 50), _report("worse", 0.6, 60),
               _report("short", 0.5, 20)]
    mark_frontier(reports)
    assert [r.frontier for r in reports] == [True, True, False, True]  # "worse" is beaten by "merged"
    plot = efficiency_plot(reports, width=21, height=11).splitlines()
    rows = {ch: i for i, line in enumerate(plot[1:12]) for ch in line[8:] if ch.isdigit()}
    cols = {ch: line[8:].index(ch) for line in plot[1:12] for ch in line[8:] if ch.isdigit()}
    assert rows == {"1": 2, "2": 3, "3": 4, "4": 5}  # pass@1 0.8, 0.7, 0.6, 0.5 on a 0..1 axis of 11 rows
    assert cols["4"] < cols["2"] < cols["3"] < cols["1"]  # fewer tokens further left


def test_a_model_the_grader_scored_nothing_of_is_listed_not_ranked():
    """pass@1 is None when the grader abstained on every sample (kitae.scoring.evaluate): the comparison once
    raised TypeError comparing None with a number."""
    reports = [_report("long", 0.8, 100), _report("unscored", None, 50)]
    mark_frontier(reports)
    assert [r.frontier for r in reports] == [True, False]
    plot = efficiency_plot(reports, width=21, height=11)
    assert "2 = unscored" in plot and "2" not in "".join(line[8:] for line in plot.splitlines()[1:12])
    assert "unscored" in format_table(reports)


@pytest.mark.parametrize("arg, expected", [("runs/verbose", ("verbose", "runs/verbose")),
                                           ("merged=runs/m/", ("merged", "runs/m/")), ("runs/x/", ("x", "runs/x/"))])
def test_parse_model_arg(arg, expected):
    assert parse_model_arg(arg) == expected


def test_unique_names():
    assert unique_names(["a", "b", "a"]) == ["a", "b", "a#2"]


# ---- CLI on a tiny real model -----------------------------------------------------------------------------
def test_eval_shortest_pairs_sft_dpo_end_to_end(long_model_dir, tmp_path):
    model, data = str(long_model_dir / "model"), str(long_model_dir / "prompts.jsonl")
    common = ["-d", data, "--max-new-tokens", "30", "--temperature", "1.5", "--seed", "0"]
    r = runner.invoke(app, ["eval", "-m", model, "-m", f"again={model}", *common, "-k", "4", "-o",
                            str(tmp_path / "ev"), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert [s["name"] for s in summary] == ["model", "again"]
    assert summary[0]["pass@1"] == summary[1]["pass@1"]  # same seed, same model, same numbers
    samples = [json.loads(x) for x in (tmp_path / "ev" / "model.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 4 and {"output_text", "completion_tokens", "passed", "compliant"} <= set(samples[0])
    per_prompt = [sum(s["passed"] for s in samples if s["prompt_index"] == i) / 4 for i in (0, 1)]
    assert summary[0]["pass@1"] == pytest.approx(sum(per_prompt) / 2)  # mean over samples, then prompts

    r = runner.invoke(app, ["long2short", "shortest", "-m", model, *common, "-n", "8", "-o", str(tmp_path / "s.jsonl")])
    assert r.exit_code == 0, r.output
    sft = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    # which sample is shortest depends on the sampled tokens (and so on torch's thread count); the selection
    # itself is checked below on fixed samples
    assert all(answers_match(r["completion"][0]["content"], r["reference_answer"]) for r in sft)
    long_row = next(r for r in sft if r["reference_answer"] == "35")
    assert long_row["completion"][0]["content"].startswith("hello world, the answer is 47. what is 12+35?")
    assert int(long_row["correct_of_n"].split("/")[0]) >= 1 and long_row["correct_of_n"].endswith("/8")
    r = runner.invoke(app, ["long2short", "dpo-pairs", "-m", model, *common, "-n", "8", "-o",
                            str(tmp_path / "p.jsonl")])
    assert r.exit_code == 0, r.output
    pairs = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert pairs and all(p["rejected_tokens"] > p["chosen_tokens"] for p in pairs)

    # kitae eval's per-sample file feeds the same selection without sampling again
    r = runner.invoke(app, ["long2short", "shortest", "--samples", str(tmp_path / "ev" / "model.jsonl"), "-o",
                            str(tmp_path / "from_eval.jsonl")])
    assert r.exit_code == 0, r.output
    from_eval = [json.loads(x) for x in (tmp_path / "from_eval.jsonl").read_text().splitlines()]
    assert from_eval == sft_rows(group_results(samples))
    # `kitae l2s`, the short name, is the same command
    r = runner.invoke(app, ["l2s", "shortest", "--samples", str(tmp_path / "ev" / "model.jsonl"), "-o",
                            str(tmp_path / "alias.jsonl")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "alias.jsonl").read_text() == (tmp_path / "from_eval.jsonl").read_text()
    r = runner.invoke(app, ["long2short", "dpo-pairs", "-m", model, "--samples", str(tmp_path / "ev" / "model.jsonl"),
                            "-o", str(tmp_path / "x.jsonl")])
    assert isinstance(r.exception, ConfigError) and "give --model (sample now) or --samples" in str(r.exception)

    for cmd, data_file in (("sft", "s.jsonl"), ("dpo", "p.jsonl")):
        out = tmp_path / cmd
        r = runner.invoke(app, ["long2short", cmd, "-m", model, "-d", str(tmp_path / data_file), "-o", str(out),
                                "--max-steps", "2", "--batch-size", "2", "--lr", "1e-3"])
        assert r.exit_code == 0, r.output
        assert "nan" not in r.output  # loss (and DPO's reward accuracy) were reported
        before, after = load_causal_lm(model).state_dict(), load_causal_lm(out).state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before)  # it trained
        assert (out / "tokenizer_config.json").exists()


@pytest.mark.slow  # a CLI subprocess per case: the full suite runs it, the fast subset leaves it
@pytest.mark.parametrize("command, row, done", [
    ("sft", {"completion": [{"role": "assistant", "content": "47"}]}, "SFT done: loss"),
    ("dpo", {"chosen": [{"role": "assistant", "content": "47"}],
             "rejected": [{"role": "assistant", "content": "47 47 47 47"}]}, "DPO done: loss"),
])
def test_long2short_output_has_no_dependency_warnings_or_bars(long_model_dir, tmp_path, command, row, done):
    """`kitae long2short sft|dpo` as a user runs them: transformers' deprecation warnings about gradient checkpointing
    (raised by TRL's config and trainers) and datasets' map bars stay out of their output."""
    import subprocess
    import sys

    rows = [{"prompt": [{"role": "user", "content": "hi"}], **row}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows * 4))
    proc = subprocess.run([sys.executable, "-m", "kitae.cli.main", "long2short", command,
                           "-m", str(long_model_dir / "model"), "-d", str(tmp_path / "d.jsonl"),
                           "-o", str(tmp_path / "out"), "--max-steps", "1", "--batch-size", "2"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert done in proc.stdout
    assert "Warning" not in proc.stdout + proc.stderr and "checkpointing" not in proc.stderr
    assert "train dataset" not in proc.stderr  # datasets' "Tokenizing train dataset" bars


def test_merge_cli_and_its_errors(two_models, tmp_path):
    r = runner.invoke(app, ["merge", str(two_models / "a"), str(two_models / "b"), "--out", str(tmp_path / "m"),
                            "--weights", "1,1"])
    assert r.exit_code == 0, r.output
    assert "x 0.5" in r.output and (tmp_path / "m" / "config.json").exists()
    r = runner.invoke(app, ["merge", str(two_models / "a"), str(two_models / "b"), "--out", str(tmp_path / "m"),
                            "--weights", "1,x"])
    assert isinstance(r.exception, ConfigError) and "--weights" in str(r.exception)


def test_chunked_evaluation_equals_one_evaluate_call(long_model_dir, long_engine):
    from kitae.graders import build_grader
    from kitae.long2short.compare import evaluate_model
    from kitae.rollout.base import SamplingParams
    from kitae.scoring.evaluate import evaluate

    rows = [json.loads(x) for x in (long_model_dir / "prompts.jsonl").read_text().splitlines()] * 2
    sp = SamplingParams(temperature=1.5, max_new_tokens=20, seed=4)
    done = []
    m1, r1 = evaluate_model(str(long_model_dir / "model"), rows, build_grader("answer", ""), 3, sp,
                            batch_prompts=1, progress=done.append)
    m2, r2 = evaluate(long_engine, rows, build_grader("answer", ""), 3, sp, batch_prompts=1)
    assert done == [1, 2, 3, 4]
    assert [(r["prompt_index"], r["output_text"]) for r in r1] == [(r["prompt_index"], r["output_text"]) for r in r2]
    assert m1 == m2


@pytest.mark.parametrize("text, end, content", [
    ("Paris.<|eot_id|>", "<|eot_id|>", "Paris."),  # Llama 3: the sample's end_marker
    ("47<end_of_turn>\n<start_of_turn>user", "<end_of_turn>", "47"),  # Gemma
    ("47<|im_end|>", None, "47"),  # ChatML, the default
    ("47 47<|im_start|>user", "<|eot_id|>", "47 47"),  # a ChatML template token still cuts
])
def test_sft_and_dpo_content_ends_at_the_model_s_own_end_marker(text, end, content):
    from kitae.long2short.selection import assistant_content

    assert assistant_content(text, end) == content

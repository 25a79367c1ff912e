"""Bad input as a person gives it to the `kitae` command: each is one short error that names the file, the row or
field, and the fix (exit status 2), never a traceback; and `kitae eval` reads a dataset with the options `kitae
train` reads it with (data.fields, answer_pattern, system, chat_template_kwargs)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kitae.models import BUNDLED_MODEL

ROOT = Path(__file__).resolve().parents[1]
GSM_ROWS = [{"question": "12+35は？", "answer": "12+35=47\n#### 47"}, {"question": "2+3は？", "answer": "2+3=5\n#### 5"}]
CONFIG = ("data: {train: gsm.jsonl, eval: null, fields: {prompt: question, reference_answer: answer}}\n"
          "rewards: [{grader: {type: answer}}]\n"
          "optim: {steps: 1, prompts_per_step: 2}\n"
          "sampling: {group_size: 2, max_new_tokens: 8}\n")


def kitae(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def refused(proc: subprocess.CompletedProcess, *says: str) -> str:
    """The one error paragraph of a refused command, checked: exit status 2, no traceback, each of `says` in it."""
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    assert proc.returncode == 2, out[-3000:]
    assert "error: " in proc.stderr, proc.stderr[-3000:]
    error = proc.stderr[proc.stderr.index("error: "):].strip()  # (after a progress bar a command had drawn)
    assert "\n\n" not in error, error
    for text in says:
        assert text in error, error
    return error


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder with a GSM8K-shaped dataset (question, answer with '#### N') and a config that maps it."""
    (tmp_path / "gsm.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in GSM_ROWS),
                                        encoding="utf-8")
    (tmp_path / "cfg.yaml").write_text(CONFIG, encoding="utf-8")
    return tmp_path


# ---- 1. a --set value YAML reads as nothing ---------------------------------------------------------------------
def test_a_set_value_that_yaml_reads_as_a_comment_is_refused(work):
    """GSM8K's pattern typed on the command line: YAML reads `####...` as a comment, the setting as null, and
    the run would train on the whole worked answer as the reference."""
    proc = kitae("train", "cfg.yaml", "--set", r"data.answer_pattern=####\s*(.+)$", cwd=work)
    refused(proc, "--set data.answer_pattern", "comment", "'####\\s*(.+)$'")
    assert not (work / "runs").exists()


# ---- 2. no rows ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("train, says", [
    ("empty.jsonl", ["empty.jsonl", "data.train", "no rows"]),
    ('{path: json, data_files: "nothing/*.jsonl"}', ["nothing/*.jsonl", "data.train", "matches no file"]),
    ("{path: json, data_files: empty.jsonl}", ["empty.jsonl", "data.train", "no rows"]),
], ids=["empty-file", "glob-matching-nothing", "builder-on-an-empty-file"])
def test_a_dataset_without_rows_is_named(work, train, says):
    (work / "empty.jsonl").write_text("")
    refused(kitae("train", "cfg.yaml", "--set", f"data.train={train}", cwd=work), *says)


# ---- 3. tokenizer files --------------------------------------------------------------------------------------------
def _model_copy(work: Path, name: str) -> Path:
    folder = work / name
    shutil.copytree(BUNDLED_MODEL, folder)
    return folder


def test_a_model_folder_without_tokenizer_files_is_named(work):
    folder = _model_copy(work, "notok")
    for f in folder.iterdir():
        if f.name.startswith("tokenizer") or f.name == "chat_template.jinja":
            f.unlink()
    refused(kitae("train", "cfg.yaml", "--set", "model.path=notok", cwd=work), "model.path", "notok",
            "no tokenizer files", "tokenizer.json")
    refused(kitae("eval", "-m", "notok", "-k", "1", cwd=work), "--model", "notok", "no tokenizer files")


def test_a_broken_tokenizer_json_is_named_with_its_line(work):
    folder = _model_copy(work, "badtok")
    (folder / "tokenizer.json").write_text('{"version": "1.0",\n "truncation": nul\n')
    refused(kitae("train", "cfg.yaml", "--set", "model.path=badtok", cwd=work), "model.path",
            str(Path("badtok") / "tokenizer.json"), "line 2", "not valid JSON")
    refused(kitae("eval", "-m", "badtok", "-k", "1", cwd=work), "--model", "tokenizer.json", "line 2")


# ---- 4. data.fields ------------------------------------------------------------------------------------------------
def test_a_misspelt_data_fields_key_gets_did_you_mean(work):
    proc = kitae("train", "cfg.yaml", "--set", "data.fields={promt: question, reference_answer: answer}", cwd=work)
    refused(proc, "data.fields.promt", "did you mean 'prompt'?")


def test_a_prompt_column_that_is_not_text_is_named_with_its_row(work):
    rows = [{"question": "1+1は？", "answer": "2"}, {"question": {"text": "2+2"}, "answer": "4"}]
    (work / "gsm.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    refused(kitae("train", "cfg.yaml", cwd=work), "gsm.jsonl, row 2, field 'question'", "data.fields.prompt",
            "not text")


# ---- 5. an empty config file ---------------------------------------------------------------------------------------
def test_an_empty_config_file_is_named(work):
    (work / "empty.yaml").write_text("# nothing yet\n")
    refused(kitae("train", "empty.yaml", cwd=work), "empty.yaml", "empty", "examples/zero.yaml")
    run = work / "runs" / "gone"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("")
    refused(kitae("train", "--resume", run, cwd=work), str(run / "config.yaml"), "empty")


# ---- 6. YAML names, not Python's -----------------------------------------------------------------------------------
@pytest.mark.slow  # a CLI subprocess per case: the full suite runs it, the fast subset leaves it
def test_messages_say_sampling_async_never_the_attribute_name(work):
    error = refused(kitae("train", "cfg.yaml", "--set", "sampling.async=maybe", cwd=work),
                    "sampling.async: expected true or false")
    assert "async_" not in error
    error = refused(kitae("train", "cfg.yaml", "--set", "sampling.asyn=true", cwd=work), "did you mean 'async'?")
    assert "async_" not in error
    refused(kitae("train", "cfg.yaml", "--set", "sampling.async_=true", cwd=work),
            "sampling.async_: unknown key; did you mean 'async'?")


# ---- 7. --stop-on-alarm again on --resume --------------------------------------------------------------------------
@pytest.mark.slow  # a CLI subprocess per case: the full suite runs it, the fast subset leaves it
def test_repeating_stop_on_alarm_on_resume_is_the_same_setting(work):
    first = kitae("train", "cfg.yaml", "--stop-on-alarm", "answer_shape", "-q", cwd=work)
    assert first.returncode == 0, first.stderr[-3000:]
    again = kitae("train", "--resume", "runs/run", "--stop-on-alarm", "answer_shape", "--set", "optim.steps=2", "-q",
                  cwd=work)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "finished after 2 steps" in again.stdout


# ---- 8. duplicate keys, template full_chars ------------------------------------------------------------------------
def test_a_duplicate_key_in_a_config_file_is_refused_with_its_line(work):
    (work / "dup.yaml").write_text(CONFIG + "optim: {steps: 50}\n")
    refused(kitae("train", "dup.yaml", cwd=work), "dup.yaml", "line 5", "'optim'", "twice")


def test_template_full_chars_below_zero_is_refused_with_the_range(work):
    proc = kitae("train", "cfg.yaml", "--set", "rewards=[{grader: {type: template, full_chars: -1}}]", cwd=work)
    refused(proc, "rewards[0].grader.full_chars", ">= 0", "-1")


# ---- 9. kitae eval reads data as kitae train does ------------------------------------------------------------------
EVAL = ["-k", "1", "--max-new-tokens", "4", "--temperature", "0", "--json"]


def _references(out: Path) -> list[str]:
    return [json.loads(line)["reference_answer"] for line in (out / "bundled.jsonl").read_text().splitlines()]


@pytest.mark.slow  # a CLI subprocess per case: the full suite runs it, the fast subset leaves it
def test_eval_reads_custom_columns_and_an_answer_pattern_from_flags(work):
    plain = kitae("eval", "-m", "bundled", "--data", "gsm.jsonl", *EVAL, cwd=work)
    refused(plain, "gsm.jsonl, row 1, field 'messages': missing", "--field prompt=COLUMN")
    proc = kitae("eval", "-m", "bundled", "--data", "gsm.jsonl", "--field", "prompt=question",
                 "--field", "reference_answer=answer", "--answer-pattern", r"####\s*(.+)$", "-o", "out", *EVAL, cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _references(work / "out") == ["47", "5"]


@pytest.mark.slow  # a CLI subprocess per case: the full suite runs it, the fast subset leaves it
def test_eval_reads_the_data_options_of_a_train_config(work):
    text = CONFIG.replace("eval: null", "eval: gsm.jsonl").replace(
        "reference_answer: answer}", r"reference_answer: answer}, answer_pattern: '####\s*(.+)$', system: Be brief.")
    (work / "cfg.yaml").write_text(text + "model: {chat_template_kwargs: {allowed: true}}\n")
    folder = _model_copy(work, "strict")
    (folder / "chat_template.jinja").write_text(  # a template that needs its variable: proof the kwargs reach it
        "{% if not allowed %}{{ raise_exception('allowed is not set') }}{% endif %}"
        + (BUNDLED_MODEL / "chat_template.jinja").read_text())
    proc = kitae("eval", "-m", "bundled=strict", "--config", "cfg.yaml", "-o", "out", *EVAL, cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (work / "out" / "bundled.jsonl").read_text().splitlines()]
    assert [r["reference_answer"] for r in rows] == ["47", "5"]
    assert rows[0]["messages"][0] == {"role": "system", "content": "Be brief."}


@pytest.mark.slow  # a CLI subprocess per case: the full suite runs it, the fast subset leaves it
def test_eval_passes_chat_template_kwargs_from_the_flag(work):
    folder = _model_copy(work, "strict")
    (folder / "chat_template.jinja").write_text(
        "{% if not allowed %}{{ raise_exception('allowed is not set') }}{% endif %}"
        + (BUNDLED_MODEL / "chat_template.jinja").read_text())
    args = ["eval", "-m", "bundled=strict", "--limit", "1", "-o", "out", *EVAL]
    refused(kitae(*args, cwd=work), "--model", "strict", "allowed is not set", "--chat-template-kwargs")
    proc = kitae(*args, "--chat-template-kwargs", '{"allowed": true}', cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    refused(kitae(*args, "--chat-template-kwargs", "{allowed", cwd=work), "--chat-template-kwargs", "JSON")

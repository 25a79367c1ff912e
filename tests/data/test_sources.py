"""Prompt sets as users have them: a Hub dataset (a Hub cache laid out by hand, HF_HUB_OFFLINE=1), datasets'
json/csv builders on globs, and the map from a dataset's columns to kitae's fields (GSM8K's shape)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from kitae.data.loader import load_prompts
from kitae.data.sources import DatasetSource, RowMap, config_files
from kitae.errors import ConfigError, DataError
from kitae.trainer.config import load_train_config
from tests.hub_cache import lay_out, offline_hub

GSM8K_CARD = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
- config_name: socratic
  data_files:
  - split: train
    path: socratic/train-*
---
# a GSM8K-shaped dataset
"""


def _gsm8k_like(folder: Path) -> Path:
    """Two configurations, GSM8K's columns: the reference sits after '####' at the end of a worked answer."""
    for config, split, rows in [("main", "train", [("What is 2+3?", "2+3=5\n#### 5"), ("What is 10*4?", "#### 40")]),
                                ("main", "test", [("What is 7-2?", "7-2 = 5\n#### 5")]),
                                ("socratic", "train", [("How much is 1+1?", "Q: ...\n#### 2")])]:
        (folder / config).mkdir(parents=True, exist_ok=True)
        table = pa.table({"question": [q for q, _ in rows], "answer": [a for _, a in rows],
                          "source": ["synthetic"] * len(rows)})
        pq.write_table(table, folder / config / f"{split}-00000-of-00001.parquet")
    (folder / "README.md").write_text(GSM8K_CARD)
    return folder


@pytest.fixture
def hub(monkeypatch, tmp_path) -> Path:
    home = tmp_path / "hf"
    offline_hub(monkeypatch, home)
    lay_out(home, "kitae-test/gsm8k-like", _gsm8k_like(tmp_path / "src"), repo_type="dataset")
    return home


GSM8K = RowMap({"prompt": "question", "reference_answer": "answer"}, r"####\s*(.+)$")


def test_a_hub_dataset_with_the_gsm8k_field_map(hub):
    rows = load_prompts(DatasetSource(hub="kitae-test/gsm8k-like", name="main", split="train"), rowmap=GSM8K)
    assert [r["messages"] for r in rows] == [[{"role": "user", "content": "What is 2+3?"}],
                                            [{"role": "user", "content": "What is 10*4?"}]]
    assert [r["reference_answer"] for r in rows] == ["5", "40"]
    assert rows[0]["source"] == "synthetic"  # an unmapped column still reaches graders as item.source
    test = load_prompts(DatasetSource(hub="kitae-test/gsm8k-like", name="main", split="test"), rowmap=GSM8K)
    assert [r["reference_answer"] for r in test] == ["5"]
    other = load_prompts(DatasetSource(hub="kitae-test/gsm8k-like", name="socratic"), rowmap=GSM8K)
    assert other[0]["messages"][0]["content"] == "How much is 1+1?"


def test_an_uncached_hub_dataset_offline_is_one_error(hub):
    with pytest.raises(ConfigError, match="dataset 'kitae-test/nope' is not a local folder and not in the Hub "
                                          "cache.*`hf download kitae-test/nope --repo-type dataset`"):
        load_prompts(DatasetSource(hub="kitae-test/nope"))


def test_an_unknown_split_names_the_dataset(hub):
    with pytest.raises(DataError, match=r"kitae-test/gsm8k-like \(main, validation\)"):
        load_prompts(DatasetSource(hub="kitae-test/gsm8k-like", name="main", split="validation"))


def test_json_and_csv_builders_on_globs(tmp_path):
    for i in range(2):
        (tmp_path / f"part{i}.jsonl").write_text(json.dumps({"q": f"{i}+1?", "a": str(i + 1)}) + "\n")
    (tmp_path / "rows.csv").write_text("q,a\n1+1?,2\n2+2?,4\n")
    fields = RowMap({"prompt": "q", "reference_answer": "a"})
    rows = load_prompts(DatasetSource(path="json", data_files=str(tmp_path / "part*.jsonl")), rowmap=fields)
    assert sorted(r["reference_answer"] for r in rows) == ["1", "2"]
    rows = load_prompts(DatasetSource(path="csv", data_files=[str(tmp_path / "rows.csv")]), rowmap=fields)
    assert [(r["messages"][0]["content"], r["reference_answer"]) for r in rows] == [("1+1?", "2"), ("2+2?", "4")]


def test_a_missing_column_names_it_and_the_columns_there_are(hub):
    bad = RowMap({"prompt": "questoin"})
    with pytest.raises(DataError) as err:
        load_prompts(DatasetSource(hub="kitae-test/gsm8k-like", name="main"), rowmap=bad)
    text = str(err.value)
    assert "row 1" in text and "questoin" in text and "question, answer, source" in text
    assert "did you mean 'question'?" in text


def test_an_answer_pattern_that_does_not_match_names_the_row(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "answer": "#### 1"}\n{"prompt": "b", "answer": "two"}\n')
    with pytest.raises(DataError, match=r"row 2.*reference_answer.*does not match 'two'"):
        load_prompts(tmp_path / "d.jsonl", rowmap=RowMap({"reference_answer": "answer"}, r"####\s*(.+)$"))


@pytest.mark.parametrize("row, expected", [
    ({"prompt": "hi"}, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]),
    ({"messages": [{"role": "user", "content": "hi"}]},
     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]),
    ({"messages": [{"role": "system", "content": "Mine."}, {"role": "user", "content": "hi"}]},  # its own kept
     [{"role": "system", "content": "Mine."}, {"role": "user", "content": "hi"}]),
])
def test_a_system_prompt_goes_first_unless_the_row_has_one(tmp_path, row, expected):
    (tmp_path / "d.jsonl").write_text(json.dumps(row) + "\n")
    assert load_prompts(tmp_path / "d.jsonl", rowmap=RowMap(system="Be brief."))[0]["messages"] == expected


def test_config_files_of_a_card():
    assert config_files(GSM8K_CARD, "main") == ["main/train-*", "main/test-*"]
    assert config_files(GSM8K_CARD, None) == ["main/train-*", "main/test-*"]  # the first when none is default
    assert config_files("# no header", "main") == []


def _config(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "runs"), "data": data,
                                    "rewards": [{"grader": {"type": "answer"}}]}))
    return path


def test_the_config_reads_hub_datasets_and_saves_them_as_written(tmp_path):
    data = {"train": {"hub": "openai/gsm8k", "name": "main", "split": "train"},
            "eval": {"hub": "openai/gsm8k", "name": "main", "split": "test"},
            "fields": {"prompt": "question", "reference_answer": "answer"}, "answer_pattern": r"####\s*(.+)$",
            "system": "Solve it."}
    cfg = load_train_config(_config(tmp_path, data))
    assert cfg.data.train == DatasetSource(hub="openai/gsm8k", name="main", split="train")
    again = load_train_config(_config(tmp_path, cfg.to_dict()["data"]))  # what config.yaml holds reads back
    assert again.data == cfg.data


@pytest.mark.parametrize("data, key", [
    ({"train": {"hub": "a/b", "path": "json"}}, "data.train"),               # both
    ({"train": {"name": "main"}}, "data.train"),                             # neither
    ({"train": {"hub": "a/b", "data_files": "x.json"}}, "data.train.data_files"),
    ({"answer_pattern": "####(("}, "data.answer_pattern"),                   # not a regex
    ({"train": {"hub": "a/b", "splt": "train"}}, "data.train.splt"),         # a typo
])
def test_bad_data_settings_name_the_key(tmp_path, data, key):
    with pytest.raises(ConfigError) as err:
        load_train_config(_config(tmp_path, data))
    assert str(err.value).startswith(key), err.value


def test_a_misspelt_field_gets_did_you_mean():
    with pytest.raises(ConfigError, match=r"^data.fields.promt: unknown kitae field; did you mean 'prompt'\?"):
        RowMap({"promt": "question"})


@pytest.mark.parametrize("value", [47, {"text": "hi"}, None])
def test_a_prompt_column_that_is_not_text_names_the_row_and_column(tmp_path, value):
    (tmp_path / "d.jsonl").write_text(json.dumps({"q": "1+1?"}) + "\n" + json.dumps({"q": value}) + "\n")
    with pytest.raises(DataError, match=r"d.jsonl, row 2, field 'q': is not text .*data.fields.prompt"):
        load_prompts(tmp_path / "d.jsonl", rowmap=RowMap({"prompt": "q"}))


def test_a_glob_matching_nothing_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=r"data.train.data_files 'parts/\*.jsonl' matches no file"):
        load_prompts(DatasetSource(path="json", data_files="parts/*.jsonl"), key="data.train")


def test_files_without_rows_are_named(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match=r"no rows \(data.train\)"):
        load_prompts(DatasetSource(path="json", data_files=str(tmp_path / "empty.jsonl")), key="data.train")
    with pytest.raises(DataError, match=r"empty.jsonl: no rows \(data.train\)"):
        load_prompts(tmp_path / "empty.jsonl", key="data.train")

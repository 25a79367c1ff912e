"""`kitae curate ...` as a user runs it: real subprocesses, files on disk, the input never touched."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections import Counter
import sys
from pathlib import Path

import pytest
import yaml

from tests.curate import tiny_task
from tests.signals import sigint_as_in_a_terminal

DEDUPE_SET = Path(__file__).parent / "data" / "dedupe_set.jsonl"


def kitae(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_format_step(tmp_path):
    data = write_rows(tmp_path / "in.jsonl", [
        {"prompt": "True or false: 2+2=4.", "reference_answer": "true"},
        {"prompt": "What is 2+2?", "reference_answer": "4"},
        {"prompt": "次のうち素数はどれ？ (ア) 4 (イ) 7", "reference_answer": "イ"},
    ])
    before = digest(data)
    out = tmp_path / "curated" / "format.jsonl"
    proc = kitae("curate", "format", "--data", data, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "[format] 3 rows in, 1 out (2 dropped)" in proc.stdout
    assert [r["prompt"] for r in read(out)] == ["What is 2+2?"]
    dropped = read(tmp_path / "curated" / "format.dropped.jsonl")
    assert [(d["reason"], d["row"]) for d in dropped] == [("format: true_false", 1), ("format: multiple_choice", 3)]
    report = json.loads((tmp_path / "curated" / "format.report.json").read_text())
    assert report["dropped"] == {"format: true_false": 1, "format: multiple_choice": 1}
    assert digest(data) == before


def test_chain_with_steps_and_overrides(tmp_path):
    out = tmp_path / "run"
    proc = kitae("curate", "run", "--steps", "format,dedupe,balance", "--data", DEDUPE_SET, "--out", out,
                 "--set", "dedupe.embedding=false", "--set", "balance.band_field=lang",
                 "--set", "balance.bands={en: 1, ja: 1}", "-q")
    assert proc.returncode == 0, proc.stderr
    names = {p.name for p in out.iterdir()}
    assert names == {"01-format.jsonl", "01-format.dropped.jsonl", "01-format.report.json",
                     "02-dedupe.jsonl", "02-dedupe.dropped.jsonl", "02-dedupe.report.json",
                     "03-balance.jsonl", "03-balance.dropped.jsonl", "03-balance.report.json",
                     "curated.jsonl", "recipe.yaml", "report.json"}
    final = read(out / "curated.jsonl")
    assert final == read(out / "03-balance.jsonl")
    for domain in {r["domain"] for r in final}:  # each domain: as many English as Japanese prompts (±1 rounding)
        bands = Counter(r["band"] for r in final if r["domain"] == domain)
        if len(bands) == 2:
            assert abs(bands["en"] - bands["ja"]) <= 1
    report = json.loads((out / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == ["format", "dedupe", "balance"]
    assert report["steps"][1]["rows_in"] == report["steps"][0]["rows_out"]
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())
    assert recipe["steps"][1]["dedupe"]["embedding"] is False
    assert "chain: 82 rows in" in proc.stdout


@pytest.mark.slow
def test_recipe_with_difficulty_resumes(tmp_path):
    model, tok = tiny_task.trained()
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    data = write_rows(tmp_path / "train.jsonl", tiny_task.rows() * 2)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({
        "data": str(data), "out": str(tmp_path / "curated"),
        "steps": ["format", {"difficulty": {"model": str(tmp_path / "model"), "n": 3, "temperature": 0.0,
                                            "max_new_tokens": 6, "drop_unsolved": True}}],
    }))
    first = kitae("curate", "run", "--recipe", recipe, "-q")
    assert first.returncode == 0, first.stderr
    rows = read(tmp_path / "curated" / "curated.jsonl")
    assert [(r["reference_answer"], r["pass_rate"]) for r in rows] == [("47", 1.0), ("47", 1.0)]
    progress = tmp_path / "curated" / "02-difficulty.progress.jsonl"
    assert len(progress.read_text().splitlines()) == 1 + 4
    # the reruns in this process (a `kitae` process costs its torch import; the first run was one, and
    # test_difficulty_interrupted_says_where_it_stopped_and_a_rerun_resumes resumes in one)
    from typer.testing import CliRunner

    from kitae.cli.main import app
    from kitae.errors import KitaeError

    again = CliRunner().invoke(app, ["curate", "run", "--recipe", str(recipe), "-q"])  # all in the progress file
    assert again.exit_code == 0, again.output
    assert read(tmp_path / "curated" / "curated.jsonl") == rows
    changed = CliRunner().invoke(app, ["curate", "run", "--recipe", str(recipe), "--set", "difficulty.n=4", "-q"])
    assert isinstance(changed.exception, KitaeError) and "--restart" in str(changed.exception)  # kitae: exit 2


def test_errors_for_people(tmp_path):
    data = write_rows(tmp_path / "in.jsonl", [{"prompt": "What is 2+2?", "reference_answer": "4"}])
    same = kitae("curate", "format", "--data", data, "--out", data)
    assert same.returncode == 2 and "is the input" in same.stderr
    typo = kitae("curate", "run", "--steps", "format,dedup", "--data", data, "--out", tmp_path / "o")
    assert typo.returncode == 2 and "did you mean 'dedupe'" in typo.stderr
    bad_mix = kitae("curate", "balance", "--data", data, "--out", tmp_path / "b.jsonl", "--bands", "hard:1")
    assert bad_mix.returncode == 2 and "name=share" in bad_mix.stderr


@pytest.mark.slow
def test_difficulty_interrupted_says_where_it_stopped_and_a_rerun_resumes(tmp_path):
    """Ctrl-C (SIGINT) in the middle: exit 130 and a message naming the prompts done and the progress file;
    the same command then resumes from there and ends with every prompt."""
    import signal
    import time

    rows = [{"messages": [{"role": "user", "content": f"{a}+{b}=?"}], "reference_answer": str(a + b)}
            for a in range(1, 9) for b in range(1, 7)]
    data = write_rows(tmp_path / "in.jsonl", rows)
    out, progress = tmp_path / "d.jsonl", tmp_path / "d.progress.jsonl"
    command = [sys.executable, "-m", "kitae.cli.main", "curate", "difficulty", "-d", str(data), "-o", str(out),
               "-n", "4", "--max-new-tokens", "8", "--set", "batch_prompts=2", "-q"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_in_a_terminal)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.exists() and len(progress.read_text().splitlines()) >= 3:  # the header and a first batch
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    done = len(progress.read_text().splitlines()) - 1
    assert proc.returncode == 130, err
    assert 0 < done < len(rows)
    assert (f"[difficulty] stopped (Ctrl-C) after {done} of {len(rows)} prompts; their samples are saved in "
            f"{progress}. Run the same command again to resume from there (--restart starts over).") in err
    assert "Traceback" not in err and not out.exists()
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"[difficulty] resuming: {done} of {len(rows)} prompts are already in {progress}" in again.stderr
    assert len(read(out)) == len(rows) and len(progress.read_text().splitlines()) == 1 + len(rows)


def test_interrupted_before_any_prompt_says_nothing_was_saved(tmp_path, capsys):
    import typer

    from kitae.cli.curate import _interrupted

    with pytest.raises(typer.Exit) as stop:
        _interrupted("difficulty", tmp_path / "d.jsonl", 1354)
    assert stop.value.exit_code == 130
    assert capsys.readouterr().err.strip() == (
        "[difficulty] stopped (Ctrl-C) before its first batch of prompts was done; nothing was saved.")

"""The README's commands, run the way a new user runs them: in a fresh folder, exactly as written, checked against
what the README says they print.

Every command line in the README's ``bash`` and ``console`` blocks is listed in COVERED below with the test that
runs it or, for the few no test here runs, the reason; ``test_every_readme_command_is_covered`` fails when the
README gains a command this file does not know. Long commands run with small ``--set`` overrides (sizes only:
the 5-minute training run keeps its 400 steps with one prompt per step); the rest run exactly.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

QUICK_START = "test_quick_start_as_written"
CURATE = "test_curate_walkthrough_as_written"
TRAINING = "test_minimal_config_as_written"
GRADERS = "test_grader_commands_as_written"
AGENTS = "test_agents_demo_as_written"
# Each README command -> the test here that runs it, or why none does.
COVERED = {
    "python3 -m venv .venv && . .venv/bin/activate": "CI's (.ci/run makes its fresh venv the same way, under /tmp)",
    "pip install -c constraints.txt -e . && kitae train examples/zero.yaml":
        f"the install is CI's (.ci/run); the training run is {QUICK_START}'s",
    "pip install -c constraints.txt -e '.[dev,ja,embed]' && python -m pytest -q": "the test suite itself (.ci/run)",
    "kitae train examples/zero.yaml": QUICK_START,
    "kitae train examples/tools.yaml": AGENTS,
    "kitae runs samples tools --step 40": AGENTS,
    "kitae runs list": QUICK_START,
    "kitae runs show zero": QUICK_START,
    "kitae ui": QUICK_START,
    'kitae chat --model runs/zero/checkpoints/step-000400/model "2+3は？"': QUICK_START,
    'kitae chat --model runs/zero/checkpoints/step-000400/model "What is the capital of France?"': QUICK_START,
    'kitae chat --model runs/zero/checkpoints/step-000400/model "12+35は？"': QUICK_START,
    "kitae train my.yaml --set optim.lr=5e-5 --set sampling.group_size=16": TRAINING,
    "kitae train --resume runs/my-run": TRAINING,
    "accelerate launch --num_processes 2 -m kitae.cli.main train my.yaml": "needs two GPUs",
    "accelerate launch --multi_gpu --num_processes 2 -m kitae.cli.main train my.yaml":
        "tests/trainer/test_train_e2e.py::test_two_process_accelerate_run_and_its_resume (the same launch on a tiny "
        "model)",
    "kitae grade --grader examples/graders/numeric.yaml --data examples/graders/finance.jsonl --out graded.jsonl":
        GRADERS,
    "kitae grader validate --grader examples/graders/numeric.yaml --data examples/graders/finance_labeled.jsonl":
        GRADERS,
    "kitae curate format --data kitae/assets/data/arith/train.jsonl --out curated/format.jsonl": CURATE,
    "kitae curate dedupe --data curated/format.jsonl --out curated/dedupe.jsonl "
    "--eval kitae/assets/data/arith/test.jsonl": CURATE,
    "kitae curate difficulty --data curated/dedupe.jsonl --out curated/difficulty.jsonl -n 10 --max-new-tokens 48":
        CURATE,
    "kitae curate balance --data curated/difficulty.jsonl --out curated/balanced.jsonl --bands hard=1,medium=1,easy=1":
        CURATE,
    "kitae curate run --steps format,dedupe,difficulty,balance --data kitae/assets/data/arith/train.jsonl "
    '--out curated/run --set "dedupe.eval=[kitae/assets/data/arith/test.jsonl]" --set difficulty.max_new_tokens=48 '
    '--set "balance.bands={hard: 1, medium: 1, easy: 1}"': CURATE,
    "pip install -c constraints.txt -e '.[dev,ja,embed]'": "CI's install (.ci/run)",
    "python -m pytest -q": "the test suite itself",
    'python -m pytest -q -m "not slow"': "the test suite itself",
    "python -m pytest -q -n 0 tests/x.py": "the test suite itself, in one process (tests/x.py: a placeholder)",
    "kitae serve model --port 8001 & kitae serve model --port 8002 &":
        "tests/rollout/test_server_train.py (kitae train against two kitae serve model replicas on free ports)",
    "kitae train examples/zero.yaml --set sampling.engine=server \\":
        "tests/rollout/test_server_train.py on a tiny run; the full zero.yaml comparison is in docs/scale.md",
    "    --set 'sampling.servers=[http://127.0.0.1:8001, http://127.0.0.1:8002]'": "the line above's continuation",
    "kitae serve model --port 8000": "tests/judge/test_serve_model.py::test_cli_process_end_to_end (on a free port)",
    "kitae serve rm --port 8001": "tests/serving/test_serve_rm.py (the same command on a free port)",
    "kitae serve rm --quantize nf4": "tests/serving/test_quantized_serving.py::"
        "test_serve_rm_quantize_scores_as_the_full_model_does (the same command on a free port)",
    "kitae serve model --model runs/NAME/checkpoints/step-000100/model": "tests/serving/test_quantized_serving.py::"
        "test_serve_model_serves_a_qlora_adapter_folder (an adapter folder saved as a checkpoint's, on a free port)",
    "KITAE_SERVE_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe())') kitae serve rm --host 0.0.0.0":
        "binds the network: tests/serving/test_http.py tests the token rule on loopback",
    "kitae curate testcases --data kitae/assets/data/code/problems.jsonl --out curated/code.jsonl":
        "tests/curate/test_testcases.py runs this step on the same bundled set (6 cases per problem, not 50) and "
        "checks every kept and dropped problem against a hand count",
    "kitae grade -g examples/graders/code.yaml -d examples/graders/code.jsonl -o graded.jsonl":
        "test_code_grader_command_as_written",
}


# ---- reading the README -------------------------------------------------------------------------------
def blocks(kind: str) -> list[list[str]]:
    """The lines of every fenced block of this kind (```bash, ```console, ```python)."""
    out, current = [], None
    for line in README.read_text(encoding="utf-8").splitlines():
        if current is None and line.strip() == f"```{kind}":
            current = []
        elif current is not None and line.strip() == "```":
            out.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return out


def strip_comment(line: str) -> str:
    """A shell line without its trailing ``# comment`` (a # outside quotes, after a space)."""
    quote = None
    for i, ch in enumerate(line):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or line[i - 1] == " "):
            return line[:i].rstrip()
    return line.rstrip()


def console_commands() -> list[tuple[str, list[str]]]:
    """(command, the output lines shown under it) for every ``$ `` line of the console blocks."""
    out: list[tuple[str, list[str]]] = []
    for block in blocks("console"):
        pending = None
        for line in block:
            if pending is not None and pending.endswith("\\"):
                pending = pending[:-1].rstrip() + " " + strip_comment(line).strip()
                out[-1] = (pending, [])
            elif line.startswith("$ "):
                pending = strip_comment(line[2:])
                out.append((pending, []))
            elif out:
                out[-1][1].append(line)
                pending = None
    return out


def readme_commands() -> list[str]:
    bash = [strip_comment(line) for block in blocks("bash") for line in block if strip_comment(line)]
    return bash + [c for c, _ in console_commands()]


def shown_output(command: str) -> list[str]:
    """The output lines the README shows for `command` (comments stripped)."""
    return [strip_comment(line) for c, lines in console_commands() if c == command for line in lines
            if strip_comment(line)]


def test_every_readme_command_is_covered():
    commands = readme_commands()
    missing = [c for c in commands if c not in COVERED]
    assert not missing, f"README commands no test knows (add them to COVERED): {missing}"
    stale = [c for c in COVERED if c not in commands]
    assert not stale, f"COVERED lists commands the README no longer has: {stale}"


# ---- running them --------------------------------------------------------------------------------------
@pytest.fixture
def user_dir(tmp_path):
    """A fresh folder with the repository's examples/ and kitae/ (the bundled data) where a clone has them."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "kitae").symlink_to(ROOT / "kitae")
    return tmp_path


def sh(command: str, cwd: Path, timeout: int = 900, check: bool = True) -> subprocess.CompletedProcess:
    """`command` through bash, as typed; `kitae` is the installed command (python -m kitae.cli.main if absent)."""
    prefix = "" if _has_kitae() else f'kitae() {{ {shlex.quote(sys.executable)} -m kitae.cli.main "$@"; }}; '
    proc = subprocess.run(["bash", "-c", prefix + command], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _has_kitae() -> bool:
    return subprocess.run(["bash", "-c", "command -v kitae"], capture_output=True).returncode == 0


def shape(line: str) -> str:
    """A printed line with its numbers (and run-specific paths) blanked: what must match between runs."""
    return re.sub(r"\d+(\.\d+)?", "#", line)


def command_for(start: str) -> str:
    [command] = [c for c in readme_commands() if c.startswith(start)]
    return command


# the 400-step run with one prompt of two short samples per step, and four eval prompts
SMALL_RUN = ("--set optim.prompts_per_step=1 --set sampling.group_size=2 --set sampling.max_new_tokens=4 "
             "--set optim.micro_batch_size=2 --set eval.limit=4 --set eval.k=1 --set eval.every=200 "
             "--set logging.save_every=400")


@pytest.mark.slow
def test_quick_start_as_written(user_dir):
    train = sh(f"kitae train examples/zero.yaml {SMALL_RUN}", user_dir, timeout=1800)
    printed = [line for line in train.stdout.splitlines() if line.strip()]
    shown = shown_output("kitae train examples/zero.yaml")
    # the same kinds of line as the README shows, in the same order (the numbers are this tiny run's)
    assert [shape(line) for line in printed if line.startswith("eval step")] == [
        shape(line) for line in shown if line.startswith("eval step")][: 3]
    assert [line.split()[2] for line in printed if line.startswith("eval step")] == ["0", "200", "400"]
    assert printed[-3] == shown[-3] == "run zero finished after 400 steps  (runs/zero)"
    assert shape(printed[-2]) == shape(shown[-2])  # step 0 -> 400: pass@1 # -> #  ...
    assert printed[-1] == shown[-1] == "inspect it: kitae runs show zero"

    runs = sh(command_for("kitae runs list"), user_dir).stdout.splitlines()
    assert runs[0].split()[:6] == ["NAME", "STATUS", "MODEL", "STEPS", "REWARD", "EVAL"]
    assert runs[1].split()[:4] == ["zero", "finished", "bundled", "400"]
    show = sh(command_for("kitae runs show zero"), user_dir).stdout
    assert "status    finished" in show and "evals (3)" in show and "config" not in show

    for command in [c for c in readme_commands() if c.startswith("kitae chat")]:
        answer = sh(command, user_dir).stdout
        # a half-trained tiny model's answer is not the README's; what must hold is one line, the answer alone
        assert answer.strip() and "<|im_end|>" not in answer and "<|im_start|>" not in answer

    ui = subprocess.Popen(["bash", "-c", "exec " + command_for("kitae ui").replace("kitae", _kitae(), 1)],
                          cwd=user_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = ui.stdout.readline()
        if not first:  # port 8765 is taken on this machine: the same command on a free port
            assert "choose another --port" in ui.stderr.read()
            ui = subprocess.Popen([*_kitae_argv(), "ui", "--port", "0"], cwd=user_dir, stdout=subprocess.PIPE,
                                  text=True)
            first = ui.stdout.readline()
        assert first == f"kitae ui: runs in {(user_dir / 'runs').resolve()}\n"
        url = re.search(r"open (http://\S+)", ui.stdout.readline()).group(1)
        import httpx

        assert [r["name"] for r in httpx.get(url + "api/runs", timeout=30).json()["runs"]] == ["zero"]
    finally:
        ui.terminate()
        ui.wait(timeout=30)


# examples/tools.yaml's 40 steps with one prompt of two episodes per step, and four eval prompts
SMALL_AGENT_RUN = ("--set optim.prompts_per_step=1 --set sampling.group_size=2 --set optim.micro_batch_size=2 "
                   "--set eval.limit=4 --set eval.k=1 --set logging.save_every=40")


@pytest.mark.slow
def test_agents_demo_as_written(user_dir):
    train = sh(f"{command_for('kitae train examples/tools.yaml')} {SMALL_AGENT_RUN}", user_dir, timeout=1800)
    printed = [line for line in train.stdout.splitlines() if line.strip()]
    evals = [line for line in printed if line.startswith("eval step")]
    assert [line.split()[2] for line in evals] == ["0", "20", "40"]
    assert all("tool_use" in line for line in evals)  # an agent run's evaluations say how often the tool was called
    assert printed[-3] == "run tools finished after 40 steps  (runs/tools)"

    shown = sh(command_for("kitae runs samples tools"), user_dir).stdout
    assert shown.startswith("run tools · step 40 · 1 group")
    assert shown.count("-- sample #") == 2 and "episode end" in shown and "trained tokens: [0, " in shown
    as_json = json.loads(sh(command_for("kitae runs samples tools") + " --json", user_dir).stdout)
    [group] = as_json["groups"]
    for sample in group["samples"]:  # every token after the prompt is trained or not, once
        spans = sorted(sample["trained_spans"] + sample["untrained_spans"])
        assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        assert spans[-1][1] == sample["completion_tokens"]


def _kitae() -> str:
    return "kitae" if _has_kitae() else f"{shlex.quote(sys.executable)} -m kitae.cli.main"


def _kitae_argv() -> list[str]:
    return ["kitae"] if _has_kitae() else [sys.executable, "-m", "kitae.cli.main"]


def my_rewards() -> str:
    """The README's my_rewards.py (its TRL-style reward functions), as written."""
    [code] = [b for b in blocks("python") if b and b[0] == "# my_rewards.py"]
    return "\n".join(code) + "\n"


@pytest.mark.slow
def test_minimal_config_as_written(user_dir):
    """The README's minimal config, verbatim, with its data/ and my_rewards.py beside it."""
    [config] = [b for b in blocks("yaml") if b and b[0] == "name: my-run"]
    (user_dir / "my.yaml").write_text("\n".join(config) + "\n", encoding="utf-8")
    (user_dir / "my_rewards.py").write_text(my_rewards())
    (user_dir / "data").mkdir()
    rows = (ROOT / "kitae/assets/data/arith/test.jsonl").read_text(encoding="utf-8").splitlines()
    (user_dir / "data/train.jsonl").write_text("\n".join(rows[:20]) + "\n", encoding="utf-8")
    (user_dir / "data/test.jsonl").write_text("\n".join(rows[20:24]) + "\n", encoding="utf-8")
    small = " --set optim.steps=2 --set optim.prompts_per_step=1 --set sampling.max_new_tokens=4 --set eval.k=1"
    train = sh(command_for("kitae train my.yaml") + small, user_dir)
    assert "run my-run finished after 2 steps  (runs/my-run)" in train.stdout
    saved = yaml.safe_load((user_dir / "runs/my-run/config.yaml").read_text())
    assert saved["optim"]["lr"] == 5e-5 and saved["sampling"]["group_size"] == 16
    assert [r["name"] for r in saved["rewards"]] == ["correct", "format", "mine"]
    resume = sh(command_for("kitae train --resume runs/my-run"), user_dir)
    assert "run my-run finished after 2 steps" in resume.stdout


@pytest.mark.slow
def test_grader_commands_as_written(user_dir):
    grade = sh(command_for("kitae grade --grader"), user_dir)
    assert "samples: 6  scored: 5  abstained: 1  errors: 0" in grade.stdout
    assert grade.stdout.rstrip().endswith("wrote 3 rows to graded.jsonl")
    assert len((user_dir / "graded.jsonl").read_text().splitlines()) == 3
    validate = sh(command_for("kitae grader validate"), user_dir)
    # the example's 12 labels are too few to trust (kitae grader lint says the same)
    assert validate.stdout.splitlines()[-1].startswith("INCONCLUSIVE: too few labels to trust: 12, need 30 (")


def test_code_grader_command_as_written(user_dir):
    command = command_for("kitae grade -g examples/graders/code.yaml")
    printed = [strip_comment(line) for line in sh(command, user_dir).stdout.splitlines()]
    assert printed == shown_output(command)  # the histogram's bars read as comments: compared up to them
    assert len((user_dir / "graded.jsonl").read_text().splitlines()) == 2


@pytest.mark.slow
def test_curate_walkthrough_as_written(user_dir):
    """The four steps, then the one-line chain: each step prints what the README shows, and the chain writes
    the same rows as the four commands, into its own folder. difficulty samples the model (on one thread, as the
    thread rule gives the bundled model): on a CPU whose float arithmetic differs a sample or two may come out
    otherwise, which this test then reports as README numbers to measure again."""
    steps = [c for c, _ in console_commands()
             if c.startswith("kitae curate ") and c.split()[2] not in ("run", "testcases")]
    assert [c.split()[2] for c in steps] == ["format", "dedupe", "difficulty", "balance"]
    printed = {}
    for command in steps:
        printed[command] = sh(command, user_dir, timeout=3600).stdout.splitlines()
        assert printed[command][0] == shown_output(command)[0], command  # "[step] N rows in, M out (K dropped)"

    dedupe = json.loads((user_dir / "curated/dedupe.report.json").read_text())["dropped"]
    comment = _comment(steps[1])  # 313 paraphrases by embedding, 25 near-verbatim (n-gram), 178 exact, ...
    numbers = [int(n) for n in re.findall(r"\d+", comment)]
    assert numbers == [dedupe["duplicate (embedding)"], dedupe["duplicate (ngram)"], dedupe["duplicate (exact)"],
                       dedupe["eval overlap (embedding)"] + dedupe["eval overlap (ngram)"],
                       dedupe["eval overlap (embedding)"], dedupe["eval overlap (ngram)"]]
    assert sum(numbers[:4]) == sum(dedupe.values()) == 646  # the comment's counts add up to the dropped rows

    # difficulty samples the model: on another CPU a few samples may differ, so its comment is checked loosely
    report = json.loads((user_dir / "curated/difficulty.report.json").read_text())["stats"]
    mean, unsolved = (float(x) for x in re.findall(r"[\d.]+", _comment(steps[2]))[:2])
    assert abs(report["mean pass rate"] - mean) <= 0.01 and abs(report["passes 0/10"] - unsolved) <= 20

    # The chain samples the same rows with the same settings and batch seeds as the difficulty step did (its
    # dedupe must write the same rows: a progress file for other rows is refused); it picks up that step's
    # progress file, as a rerun does, instead of sampling all 13,540 completions a second time. That the samples
    # of a resumed or split run equal an uninterrupted one's is tests/curate's (test_recipe_with_difficulty_resumes,
    # test_difficulty_interrupted_says_where_it_stopped_and_a_rerun_resumes).
    chain = command_for("kitae curate run")
    (user_dir / "curated/run").mkdir()
    shutil.copy(user_dir / "curated/difficulty.progress.jsonl", user_dir / "curated/run/03-difficulty.progress.jsonl")
    ran = sh(chain, user_dir, timeout=3600).stdout.splitlines()
    for line in shown_output(chain):
        assert line.startswith("...") or line in ran, line  # the chain's summary, as the README shows it
    assert "--out curated/run" in chain and (user_dir / "curated/run/curated.jsonl").exists()
    assert (user_dir / "curated/run/curated.jsonl").read_text() == (user_dir / "curated/balanced.jsonl").read_text()


def _comment(command: str) -> str:
    """The comment on the output line the README shows for `command`."""
    for c, lines in console_commands():
        if c == command:
            return lines[0].split("#", 1)[1]
    raise AssertionError(command)

"""The package as a user meets it: version, entry points, license, typing marker, honest README numbers."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import kitae
from kitae.errors import ConfigError
from kitae.trainer.config import load_train_config

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize("argv", [[sys.executable, "-m", "kitae", "--version"], ["kitae", "--version"]])
def test_version_from_the_command_and_from_python_m(argv):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"kitae {PYPROJECT['project']['version']}" == f"kitae {kitae.__version__}"


def test_python_m_kitae_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "kitae", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Usage: kitae" in out.stdout and "train" in out.stdout


def test_license_file_and_typing_marker_ship_with_the_package():
    meta = PYPROJECT["project"]
    assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "kitae" / "py.typed").exists()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["kitae"]
    assert any(c.startswith("Programming Language :: Python :: 3") for c in meta["classifiers"])


def test_report_to_takes_one_name_or_a_list():
    one = load_train_config(data={"rewards": [{"grader": {"type": "answer"}}], "logging": {"report_to": "tensorboard"}})
    many = load_train_config(data={"rewards": [{"grader": {"type": "answer"}}],
                                   "logging": {"report_to": ["tensorboard", "wandb"]}})
    assert one.logging.report_to == ["tensorboard"] and many.logging.report_to == ["tensorboard", "wandb"]
    with pytest.raises(ConfigError, match="logging.report_to"):
        load_train_config(data={"rewards": [{"grader": {"type": "answer"}}], "logging": {"report_to": 3}})


def test_readme_states_the_bundled_models_true_size():
    from safetensors import safe_open

    with safe_open(str(ROOT / "kitae/assets/models/kitae-tiny-base/model.safetensors"), "pt") as f:
        n = sum(f.get_slice(k).get_shape().numel() if hasattr(f.get_slice(k).get_shape(), "numel")
                else _prod(f.get_slice(k).get_shape()) for k in f.keys())
    readme = (ROOT / "README.md").read_text()
    assert f"{n:,}" in readme
    sizes = set(re.findall(r"(\d+(?:\.\d+)?)M-parameter", readme))
    assert sizes == {f"{n / 1e6:.2f}"}, sizes  # one size, everywhere the README gives one


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def test_user_facing_text_names_sources_not_seed_files():
    files = [p for d in ("kitae", "docs", "examples", "scripts") for p in (ROOT / d).rglob("*")
             if p.suffix in (".py", ".md", ".yaml", ".yml", ".html", ".js")] + [ROOT / "README.md"]
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in files
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if re.search(r"\bseed 00\d|\bthe seed's\b|shared/(reference|seeds)", line, re.I)]
    assert bad == []


def test_the_command_starts_without_importing_torch_or_transformers():
    """`kitae --help` and errors that need no model must not pay seconds of imports (a bad path answers at once)."""
    code = ("import sys; from kitae.cli import main\n"
            "sys.argv = ['kitae', '--version']\n"
            "try:\n    main.main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("path", ["graded.jsonl", "eval_results/base.jsonl", "eval_results/summary.json"])
def test_what_the_readmes_commands_write_in_the_checkout_is_ignored(path):
    """`kitae eval` (default --out eval_results/) and the README's `kitae grade ... -o graded.jsonl`, run in a
    fresh clone, leave nothing for `git status` to show."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, timeout=60)
    assert out.returncode == 0, f"{path} is not ignored by .gitignore"

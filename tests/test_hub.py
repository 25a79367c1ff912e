"""Hub ids as model paths, resolved from a Hub cache laid out by hand with HF_HUB_OFFLINE=1 (never the network):
the id, a revision (``model.revision`` or ``ID@REVISION``), the name servers report, and the commands a user
runs with an id (`kitae chat`, `kitae serve model`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kitae.errors import ConfigError
from kitae.hub import looks_like_repo_id, split_revision
from kitae.models import BUNDLED_MODEL, load_causal_lm, load_tokenizer, model_name, resolve_model_path
from tests.hub_cache import commit_of, lay_out, offline_hub

ROOT = Path(__file__).resolve().parents[1]
REPO = "kitae-test/tiny-base"


@pytest.fixture
def hub(monkeypatch, tmp_path) -> Path:
    """HF_HOME with the bundled model cached as kitae-test/tiny-base: main and tag v1 at one commit, and branch
    'old' at another whose config.json says so."""
    home = tmp_path / "hf"
    offline_hub(monkeypatch, home)
    lay_out(home, REPO, BUNDLED_MODEL, refs=("main", "v1"), commit=commit_of("new"))
    old = lay_out(home, REPO, BUNDLED_MODEL, refs=("old",), commit=commit_of("old"))
    config = json.loads((old / "config.json").read_text())
    (old / "config.json").write_text(json.dumps({**config, "kitae_test_revision": "old"}))
    return home


@pytest.mark.parametrize("name, expected", [
    ("Qwen/Qwen2.5-0.5B-Instruct", True),   # ORG/NAME
    ("gpt2", True),                         # a bare name (transformers' canonical ids)
    ("/abs/folder", False),                 # an absolute path is never sent to the Hub
    ("./rel/folder", False),                # nor a path that says it is one
    ("../up", False),
    ("a/b/c", False),                       # three parts: a path
    ("org/na..me", False),                  # '..' is not allowed in ids
])
def test_what_counts_as_a_hub_id(name, expected):
    assert looks_like_repo_id(name) is expected


def test_a_revision_after_at_or_given_apart():
    assert split_revision("org/name@v1") == ("org/name", "v1")
    assert split_revision("org/name", "v1") == ("org/name", "v1")
    assert split_revision("/folder/with@sign") == ("/folder/with@sign", None)  # a path keeps its '@'
    with pytest.raises(ConfigError, match="give one"):
        split_revision("org/name@v1", "v2")


def test_a_cached_id_resolves_to_its_snapshot_at_each_revision(hub):
    main = resolve_model_path(REPO, "model.path")
    assert Path(main) == hub / "hub" / "models--kitae-test--tiny-base" / "snapshots" / commit_of("new")
    assert resolve_model_path(REPO, revision="v1") == main                 # a tag
    assert resolve_model_path(f"{REPO}@{commit_of('new')}") == main        # a commit
    old = resolve_model_path(REPO, revision="old")                          # a branch
    assert old != main and json.loads((Path(old) / "config.json").read_text())["kitae_test_revision"] == "old"
    assert resolve_model_path(f"{REPO}@old") == old
    assert model_name(main) == REPO and model_name(BUNDLED_MODEL) == "kitae-tiny-base"


def test_an_unknown_revision_or_an_uncached_id_is_one_error_naming_it(hub):
    with pytest.raises(ConfigError) as err:
        resolve_model_path(REPO, "model.path", revision="nope")
    text = str(err.value)
    assert text.startswith(f"model.path: model '{REPO}' at revision 'nope' is not a local folder and not in the "
                           f"Hub cache ({hub / 'hub'})")
    assert f"`hf download {REPO} --revision nope`" in text
    with pytest.raises(ConfigError, match="'kitae-test/missing' is not a local folder and not in the Hub cache"):
        resolve_model_path("kitae-test/missing", "model.path")


def test_a_revision_for_a_local_folder_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="a revision applies to Hub ids only"):
        resolve_model_path(BUNDLED_MODEL, "model.path", revision="v1")


def test_a_hub_repository_that_is_no_model_is_refused(hub, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("not a model")
    lay_out(hub, "kitae-test/notes", tmp_path / "notes")
    with pytest.raises(ConfigError, match="the Hub repository 'kitae-test/notes' has no config.json"):
        resolve_model_path("kitae-test/notes")


def test_the_loaders_take_an_id(hub):
    tok = load_tokenizer(REPO)
    text = "2+3は？"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text  # the model's own tokenizer
    model = load_causal_lm(REPO)
    bundled = load_causal_lm("bundled")
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), bundled.state_dict().values()))


def _kitae(hub: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(PYTHONPATH=str(ROOT), HF_HOME=str(hub), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_kitae_chat_with_a_hub_id(hub):
    proc = _kitae(hub, "chat", "--model", f"{REPO}@v1", "2+3は？", "--max-new-tokens", "8")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), "an answer is printed"


def test_kitae_serve_model_reports_the_hub_id(hub):
    from kitae.serving.server import load_service

    service = load_service(REPO)
    try:
        assert service.name == REPO
    finally:
        service.close()

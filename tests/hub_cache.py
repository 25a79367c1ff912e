"""A Hugging Face Hub cache laid out by hand, the way huggingface_hub writes one, so tests resolve Hub ids with
``HF_HUB_OFFLINE=1`` and never touch the network:

    HF_HOME/hub/models--ORG--NAME/
        refs/main                      the commit the branch points to
        snapshots/COMMIT/config.json   the files (huggingface_hub links them to blobs/; copies read the same)
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path


def commit_of(name: str) -> str:
    """A 40-hex commit id (what huggingface_hub takes for a commit, not a branch)."""
    return hashlib.sha1(name.encode()).hexdigest()


def lay_out(home: Path, repo_id: str, source: Path, repo_type: str = "model",
            refs: tuple[str, ...] = ("main",), commit: str | None = None) -> Path:
    """Copy the files of folder `source` into `home`'s Hub cache as `repo_id` at `commit`, with each of `refs`
    (branches or tags) pointing to it. Returns the snapshot folder."""
    commit = commit or commit_of(f"{repo_id}@{refs}")
    repo = Path(home) / "hub" / f"{repo_type}s--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(source, snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    return snapshot


def offline_hub(monkeypatch, home: Path) -> Path:
    """Point this process and its subprocesses at the cache under `home`, offline. Returns the cache folder."""
    from huggingface_hub import constants

    cache = Path(home) / "hub"
    cache.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache

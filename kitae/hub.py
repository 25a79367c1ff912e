"""Models and datasets named by a Hugging Face Hub id, found the way transformers and datasets find them.

A model argument that is not a local folder (``Qwen/Qwen2.5-1.5B-Instruct``, ``gpt2``) is a Hub id:
:func:`hub_snapshot` returns the folder of its snapshot in the Hub cache, downloading what is missing when the
Hub can be reached (huggingface_hub's own progress bars). It honours what huggingface_hub honours:
``HF_HOME`` / ``HF_HUB_CACHE`` (where the cache is), ``HF_TOKEN`` (private and gated repositories),
``HF_ENDPOINT`` (a mirror) and ``HF_HUB_OFFLINE=1`` (the cache only, never the network).

Every failure is one :class:`~kitae.errors.ConfigError` under the option or config key that named the id,
raised before any model library loads anything: offline and not cached (naming the id, the cache folder and
the command that fetches it), no such repository, a gated one without a token, an unknown revision, no
network. An id may carry its revision after ``@`` (``Qwen/Qwen3-0.6B@main``, a branch, tag or commit).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from kitae.errors import ConfigError

# What a repository id looks like ("name" or "org/name"); anything else is never sent to the Hub.
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?")

# The files a model needs (config, weights, tokenizer, chat template, processor); no other formats' copies.
MODEL_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]


def split_revision(name: str, revision: str | None = None) -> tuple[str, str | None]:
    """``"org/name@rev"`` -> ``("org/name", "rev")``; a revision given on its own wins over none."""
    repo, at, rev = str(name).partition("@")
    if at and looks_like_repo_id(repo) and rev:
        if revision is not None and revision != rev:
            raise ConfigError("revision", f"{name!r} names revision {rev!r} but revision {revision!r} is also set; "
                              "give one")
        return repo, rev
    return str(name), revision


def looks_like_repo_id(name: str) -> bool:
    """Whether `name` has the shape of a Hub repository id (it may still not exist)."""
    text = str(name)
    return bool(_REPO_ID.fullmatch(text)) and ".." not in text and not text.startswith(".") and not text.endswith(".")


def hub_id_snapshot(name: str, revision: str | None = None, key: str = "model", what: str = "model") -> str | None:
    """The snapshot folder (:func:`hub_snapshot`) of `name` when it names a Hub repository rather than a local
    path: nothing of that name exists here and it has an id's shape (``ID@REVISION`` too); None otherwise."""
    repo, rev = split_revision(str(name), revision)
    if Path(name).exists() or not looks_like_repo_id(repo):
        return None
    return hub_snapshot(repo, rev, key, what=what)


def cache_folder() -> str:
    """The Hub cache huggingface_hub uses now (``HF_HUB_CACHE``, else ``HF_HOME``/hub)."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def hub_snapshot(repo_id: str, revision: str | None = None, key: str = "model", repo_type: str = "model",
                 what: str = "model", files: tuple[str, ...] | None = None) -> str:
    """The local snapshot folder of `repo_id` at `revision` (default: the repository's main branch). Online,
    only the files matching `files` are fetched (default for models: :data:`MODEL_FILES`; else every file)."""
    return _snapshot(repo_id, revision, key, repo_type, what, files, cache_folder(), offline())


def hub_file(repo_id: str, filename: str, revision: str | None = None, repo_type: str = "model") -> str | None:
    """One file of a Hub repository (cached or downloaded), or None when the repository has no such file or it
    cannot be had now (the snapshot that follows reports why)."""
    from huggingface_hub import errors, hf_hub_download

    try:
        return hf_hub_download(repo_id, filename, revision=revision, repo_type=repo_type,
                               local_files_only=offline())
    except (errors.HfHubHTTPError, errors.LocalEntryNotFoundError, errors.EntryNotFoundError,
            errors.HFValidationError, OSError):
        return None


@lru_cache(maxsize=64)  # one lookup per id, revision and cache in a process (every loader resolves the same id)
def _snapshot(repo_id: str, revision: str | None, key: str, repo_type: str, what: str,
              files: tuple[str, ...] | None, cache: str, is_offline: bool) -> str:
    from huggingface_hub import errors, snapshot_download

    fetch = f"`hf download {repo_id}{f' --revision {revision}' if revision else ''}" + \
            (f" --repo-type {repo_type}`" if repo_type != "model" else "`")
    where = f"{what} {repo_id!r}" + (f" at revision {revision!r}" if revision else "")
    patterns = list(files) if files else MODEL_FILES if repo_type == "model" else None
    try:
        # offline, say so: huggingface_hub 1.33 skips its offline fallback for a commit revision and asks the Hub
        folder = snapshot_download(repo_id, revision=revision, repo_type=repo_type, allow_patterns=patterns,
                                   local_files_only=is_offline)
        if repo_type == "model" and not files and not is_offline and not any(Path(folder).glob("*.safetensors")):
            # an older repository with PyTorch .bin weights only: fetch those too (never both formats)
            folder = snapshot_download(repo_id, revision=revision, repo_type=repo_type,
                                       allow_patterns=MODEL_FILES + ["*.bin"])
        return folder
    except errors.GatedRepoError:
        raise ConfigError(key, f"{where} is gated on the Hub: accept its terms on its page, then set HF_TOKEN "
                          "(or run `hf auth login`)") from None
    except errors.RepositoryNotFoundError:
        raise ConfigError(key, f"no {what} {repo_id!r} on the Hub (or it is private: set HF_TOKEN), and no local "
                          f"folder of that name; give a Hub id or a local folder") from None
    except errors.RevisionNotFoundError:
        raise ConfigError(key, f"{where}: no such revision on the Hub; give a branch, tag or commit") from None
    except errors.LocalEntryNotFoundError:
        if is_offline:
            raise ConfigError(key, f"{where} is not a local folder and not in the Hub cache ({cache}), and "
                              f"HF_HUB_OFFLINE=1 keeps kitae off the network; fetch it with {fetch} while online, "
                              "or give a local folder") from None
        raise ConfigError(key, f"{where} is not a local folder or in the Hub cache ({cache}), and the Hub could "
                          f"not be reached; check the network (or HF_ENDPOINT), or fetch it with {fetch}") from None
    except errors.HFValidationError as exc:
        raise ConfigError(key, f"{repo_id!r} is neither a local folder nor a valid Hub id ({exc})") from None
    except (errors.HfHubHTTPError, OSError) as exc:
        raise ConfigError(key, f"{where}: the download failed ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                          f"run again, or fetch it with {fetch}") from None

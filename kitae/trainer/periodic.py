"""What a run does every N steps: evaluations (``eval.every``), checkpoints (``logging.save_every``) and weight
pushes to the rollout servers (``sampling.sync_every``); 0 is never."""

from __future__ import annotations


def due(step: int, every: int) -> bool:
    """Whether something done every ``every`` steps (0: never) is due at ``step``: evaluations, checkpoints,
    weight pushes to the rollout servers."""
    return every > 0 and step % every == 0

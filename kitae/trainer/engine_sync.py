"""Keeping the rollout engine in step with the policy: weight pushes, the engine that samples evaluations, and
the engine's own state in checkpoints. Sampling with it is kitae.trainer.collect's.

- Weights: an engine with its own copy of the weights (kitae.rollout.base.SyncsWeights: the rollout servers) gets
  the policy's every ``sampling.sync_every`` steps, and before every evaluation; with ``sampling.async`` the
  pipeline (kitae.trainer.async_pipeline) takes the weights to its rollout worker or servers instead.
- Evaluations sample with the run's engine, unless it keeps weights of its own that never take the policy's (frozen
  servers, ``sampling.sync: none``): then with the policy in this process.
- Checkpoints keep the state of an engine that has one (kitae.rollout.base.SavesState), under ``engine``.
"""

from __future__ import annotations

import time
from typing import Any

from kitae.agents.engine import AgentEngine
from kitae.rollout.base import SavesState, SyncsWeights
from kitae.trainer import sharded
from kitae.trainer.async_pipeline import RolloutPipeline
from kitae.trainer.config import TrainConfig
from kitae.trainer.periodic import due


class EngineSync:
    """Keeps ``engine`` (the run's rollout engine) in step with the policy; ``pipeline``: ``sampling.async``'s,
    which pushes the weights itself (the Trainer sets it)."""

    def __init__(self, cfg: TrainConfig, acc, engine):
        self.cfg, self.acc, self.engine = cfg, acc, engine
        self.pipeline: RolloutPipeline | None = None

    def sync_weights(self, policy, version: int, force: bool = False) -> dict[str, float]:
        """The policy is at ``version``: with ``sampling.async`` its weights go to the rollout worker or servers
        and the next steps are submitted (kitae.trainer.async_pipeline); else :meth:`push_to_servers`."""
        if self.pipeline is not None:
            return self.pipeline.push(policy, version)
        return self.push_to_servers(policy, version, force)

    def push_to_servers(self, policy, version: int, force: bool = True) -> dict[str, float]:
        """Push the policy to an engine that syncs weights (the rollout servers) every ``sampling.sync_every``
        steps (or now, with ``force``) unless it holds ``version`` already; returns ``sync_secs`` when it pushed, and
        the bytes it moved against a full push's (``sync/bytes``, ``sync/full_bytes``; the main process's)."""
        engine = self.engine
        if not isinstance(engine, SyncsWeights) or engine.frozen or engine.version == version:
            return {}
        if not (force or due(version, engine.sync_every)):
            return {}
        t0 = time.perf_counter()
        state = sharded.full_model_state(self.acc, policy)  # FSDP: every process gathers, the main one pushes
        moved: dict[str, float] = {}
        if self.acc.is_main_process:
            moved = engine.sync_weights(policy, version, state) or {}  # sync/bytes, sync/full_bytes
        if self.acc.num_processes > 1:  # every process's engine learns what the replicas now hold
            from accelerate.utils import broadcast_object_list

            synced = [engine.synced_state(), moved]  # the bytes too: every process logs the same metric keys
            broadcast_object_list(synced)
            engine.load_synced_state(synced[0])
            moved = synced[1]
        return {"sync_secs": time.perf_counter() - t0, **moved}

    def eval_engine(self, policy, tokenizer):
        """The engine that samples evaluations: the run's, unless it keeps weights of its own that never take the
        policy's (frozen servers, ``sampling.sync: none``); then the policy in this process, with the run's chat
        settings."""
        if isinstance(self.engine, SyncsWeights) and self.engine.frozen:
            from kitae.rollout.hf import HFEngine

            engine = HFEngine(policy, tokenizer)
            engine.set_chat(self.cfg.model.chat_template_kwargs, self.cfg.model.end_marker)
            return self.engine.with_engine(engine) if isinstance(self.engine, AgentEngine) else engine
        return self.engine

    def close(self) -> None:
        """An agent's tools: their MCP sessions and event loop."""
        if isinstance(self.engine, AgentEngine):
            self.engine.close()

    # ---- checkpoints -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"engine": self.engine.state_dict() if isinstance(self.engine, SavesState) else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if isinstance(self.engine, SavesState) and state.get("engine") is not None:
            self.engine.load_state_dict(state["engine"])

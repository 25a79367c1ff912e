"""Pre-flight: everything about a run that can be wrong is checked before the model loads.

Loading a model takes seconds to minutes; a typo in a grader spec or a row too long for the model must not wait
for it. :func:`preflight` checks, in this order, and raises ConfigError or DataError at the first problem:

0. the config's numbers (:func:`kitae.config.check_numbers`): bounds, and no NaN or infinity, for a config
   changed in Python after it was read (one read from YAML was checked as it was read);
1. the model path: a local folder, or a Hub id found in the Hub cache or downloaded (kitae.hub); and
   ``model.quantization``: bitsandbytes installed and able to run that layer on this machine's device;
2. every reward component: grader specs built, ``module:function`` reward functions imported (the current folder
   and the config file's folder are on the import path, see :func:`add_import_paths`); the eval grader;
   the sampler's pass component;
3. the training and eval data: loaded and validated row by row;
4. lengths: every prompt, with the chat template applied as the rollout engine applies it, plus
   ``max_new_tokens`` must fit in the model's context (``max_position_embeddings`` in config.json);
   with ``environment:``, the prompt rendered with the tools plus ``environment.episode_max_tokens``, after the
   environment's checks (kitae.agents.engine.check_environment: the factory and tool functions import, the chat
   template renders tools, the MCP servers answer);
5. rollout servers (``sampling.engine: server``): every replica in ``sampling.servers`` answers
   (:func:`kitae.rollout.server.preflight`; a KitaeError names the URL).

It reads only the tokenizer and config.json. The Trainer takes what it built (:class:`Checked`), so nothing is
loaded or built twice.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitae.agents.engine import check_environment
from kitae.config import check_numbers
from kitae.errors import ConfigError, DataError
from kitae.registry import load_target, unknown_name_message
from kitae.scoring.components import RewardComponent
from kitae.trainer.config import RewardConfig, TrainConfig, load_data

SHOWN_ROWS = 5  # rows named in a length error; the rest are counted


@dataclass
class Checked:
    """What pre-flight loaded and built, for the Trainer to use as is."""

    model_path: str
    tokenizer: Any
    components: list  # [RewardComponent]
    eval_grader: Any
    pass_component: str | None
    train_rows: list[dict]
    eval_rows: list[dict]  # already cut to eval.limit
    servers: dict[str, str | None] | None = None  # engine server: each replica's URL -> its served model name
    processor: Any = None  # a vision-language model's processor (kitae.models.load_processor); None for text

    def close(self) -> None:
        for grader in [c.grader for c in self.components] + [self.eval_grader]:
            grader.close()


def preflight(cfg: TrainConfig, config_dir: str | Path | None = None) -> Checked:
    """Check everything in `cfg` that does not need the model's weights (see the module docstring).

    `config_dir`: the folder of the config file, put on the import path with the current folder.
    """
    from kitae.graders import build_grader
    from kitae.models import is_vision_model, load_processor, load_tokenizer, resolve_model_path

    check_numbers(cfg)
    model_path = resolve_model_path(cfg.model.path, "model.path", revision=cfg.model.revision)
    check_quantization(cfg)
    add_import_paths(config_dir)
    components = build_components(cfg.rewards)
    built = [c.grader for c in components]
    try:
        eval_grader = build_grader(cfg.eval_grader_spec(), "eval.grader")
        built.append(eval_grader)
        pass_name = pass_component(cfg, [c.name for c in components])
        rowmap = cfg.data.rowmap()
        train_file, train_rows = load_data(cfg.data.train, "data.train", rowmap)
        eval_file, eval_rows = load_data(cfg.data.eval, "data.eval", rowmap, cfg.eval.limit)
        tokenizer = load_tokenizer(model_path, "model.path")
        processor = load_processor(model_path) if is_vision_model(model_path) else None
        check_images(cfg, processor, [(train_file, train_rows), (eval_file, eval_rows)])
        context = model_context(model_path)
        encode = None if context is None else prompt_encoder(cfg.sampling.engine.type, tokenizer, processor,
                                                             cfg.model.chat_template_kwargs)
        agent_encode = check_environment(cfg, tokenizer)  # environment: tools import, template renders them
        if encode is not None and agent_encode is not None:  # an episode: the prompt with its tools + its budget
            budget = cfg.environment.episode_max_tokens
            for rows, file in ((train_rows, train_file), (eval_rows, eval_file)):
                check_lengths(rows, file, agent_encode, context, budget, "environment.episode_max_tokens")
        elif encode is not None:
            check_lengths(train_rows, train_file, encode, context, cfg.sampling.max_new_tokens,
                          "sampling.max_new_tokens")
            eval_key = "eval.max_new_tokens" if cfg.eval.max_new_tokens else "sampling.max_new_tokens"
            check_lengths(eval_rows, eval_file, encode, context,
                          cfg.eval.max_new_tokens or cfg.sampling.max_new_tokens, eval_key)
        servers = check_servers(cfg)
    except BaseException:
        for grader in built:
            grader.close()
        raise
    return Checked(model_path, tokenizer, components, eval_grader, pass_name, train_rows, eval_rows, servers,
                   processor)


def check_quantization(cfg: TrainConfig) -> None:
    """``model.quantization`` that bitsandbytes cannot run on this machine's training device (or bitsandbytes
    missing) fails here, in seconds, not after the data and graders are read (kitae.quantization)."""
    q = cfg.model.quantization
    if q is None:
        return
    import torch

    from kitae.quantization import check_supported

    check_supported(q.bits, q.type, "cuda" if torch.cuda.is_available() else "cpu")


def check_images(cfg: TrainConfig, processor: Any, sets: list[tuple[str, list[dict]]]) -> None:
    """Image prompts need a vision-language model, which samples in this process (the ``hf`` engine, whole
    trajectories); a text model gets a DataError naming the first row with an image."""
    if processor is None:
        for file, rows in sets:
            for i, row in enumerate(rows):
                if row.get("images"):
                    raise DataError(file, i + 1, "messages", f"has an image, but model.path {cfg.model.path!r} is "
                                    "a text model; give a vision-language model (e.g. model.path: kitae-tiny-vl) or "
                                    "drop the image rows")
        return
    from kitae.rollout.base import ENGINES, SamplesImages

    name = cfg.sampling.engine.type  # the engine's image form (kitae.rollout.vision, in process) samples them
    if name not in ENGINES or not issubclass(ENGINES.get(name, "sampling.engine"), SamplesImages):
        raise ConfigError("sampling.engine", f"{name!r}: a vision-language model samples in this "
                          "process for now; use the hf engine")
    if cfg.sampling.partial is not None:
        raise ConfigError("sampling.partial", "partial rollouts take text models only for now (a continued "
                          "trajectory would need its images again); remove sampling.partial")


def check_servers(cfg: TrainConfig) -> dict[str, str | None] | None:
    """Engines that sample on servers (kitae.rollout.base.ChecksServers): each replica's URL -> served model
    name, once every one answered; None for engines in this process."""
    from kitae.rollout.base import ENGINES, ChecksServers

    cls = ENGINES.get(cfg.sampling.engine.type, "sampling.engine")
    return cls.check_servers(cfg.sampling) if issubclass(cls, ChecksServers) else None


def add_import_paths(config_dir: str | Path | None = None) -> None:
    """Put the current folder and the config file's folder on ``sys.path``, so ``function: "my_rewards:brevity"``
    finds my_rewards.py in either. They go last: a module there never hides an installed package."""
    for folder in (Path.cwd(), config_dir):
        if folder is not None and str(Path(folder).resolve()) not in sys.path:
            sys.path.append(str(Path(folder).resolve()))


def pass_component(cfg: TrainConfig, names: list[str]) -> str | None:
    """The reward component whose score makes each prompt's pass rate for the sampler (None: not needed)."""
    sc = cfg.data.sampler
    rc = cfg.sampling.repeat
    names = names + (["repeat"] if rc is not None and rc.penalty != 0 else [])
    if sc.correct is not None and sc.correct not in names:
        raise ConfigError("data.sampler.correct", unknown_name_message("reward component", sc.correct, names))
    if sc.correct is None and sc.type != "uniform":
        if "correct" not in names:
            raise ConfigError("data.sampler.correct", f"the {sc.type} sampler needs pass rates: name the reward "
                              f"component that says a sample is correct (one of {', '.join(names)})")
        return "correct"
    return sc.correct


def model_context(model_path: str) -> int | None:
    """The model's context in tokens from its config.json (None when it does not say)."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for section in (config, config.get("text_config") or {}):
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx"):
            if isinstance(section.get(key), int) and section[key] > 0:
                return section[key]
    return None


def prompt_encoder(engine: str, tokenizer: Any, processor: Any = None, chat_template_kwargs: dict | None = None):
    """The prompt token ids of a row's messages, exactly as the rollout engine makes them (image tokens
    included, for a vision-language model; ``model.chat_template_kwargs`` applied); None for an engine that
    does not say (kitae.rollout.base.EncodesPrompts)."""
    from kitae.rollout.base import ENGINES, EncodesPrompts

    cls = ENGINES.get(engine, "sampling.engine")
    if processor is not None:  # its image form (check_images: it has one)
        built = cls.for_images(None, tokenizer, processor)
    elif issubclass(cls, EncodesPrompts):
        built = cls(None, tokenizer)
    else:
        return None
    built.set_chat(chat_template_kwargs)
    return built.encode_prompt


def check_lengths(rows: list[dict], file: str, encode, context: int, max_new_tokens: int, key: str) -> None:
    """DataError naming the rows whose prompt tokens + max_new_tokens exceed `context`."""
    if not rows:
        return
    if max_new_tokens >= context:
        raise ConfigError(key, f"{max_new_tokens} new tokens leave no room for a prompt in the model's context "
                          f"of {context} tokens (max_position_embeddings in config.json)")
    room = context - max_new_tokens
    long = [(i + 1, n) for i, row in enumerate(rows) if (n := len(encode(row["messages"]))) > room]
    if not long:
        return
    fix = f"shorten or drop them, or lower {key}"
    where = f"the model's context is {context} tokens (max_position_embeddings in config.json)"
    if len(long) == 1:
        row, n = long[0]
        raise DataError(file, row, None, f"the prompt takes {n} tokens (chat template applied) + {key} "
                        f"{max_new_tokens} = {n + max_new_tokens}, but {where}; shorten or drop the row, or lower {key}")
    shown = ", ".join(f"row {row} ({n} tokens)" for row, n in long[:SHOWN_ROWS])
    more = f" and {len(long) - SHOWN_ROWS} more" if len(long) > SHOWN_ROWS else ""
    raise DataError(file, None, None, f"{len(long)} prompts do not fit: {shown}{more} (chat template applied) + "
                    f"{key} {max_new_tokens} is more than {where}; {fix}")


def build_components(cfgs: list[RewardConfig]) -> list[RewardComponent]:
    """The run's reward components: each a grader built from its spec, or a reward function imported by name."""
    from kitae.graders import build_grader
    from kitae.graders.adapters import grader_from_callable

    out = []
    for i, c in enumerate(cfgs):
        path = f"rewards[{i}]"
        if c.grader is not None:
            grader = build_grader(c.grader, f"{path}.grader")
        else:
            grader = grader_from_callable(load_target(c.function, f"{path}.function"), c.name)
        out.append(RewardComponent(c.name, c.weight, grader, c.think or c.default_think()))
    return out


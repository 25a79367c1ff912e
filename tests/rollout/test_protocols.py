"""The engine contract (kitae.rollout.base): each engine claims the protocols it implements, and the trainer decides
by them alone. A third party's engine with nothing but ``generate`` trains; one that keeps its own copy of the
weights gets the policy's pushed, and one with state of its own gets it back on resume."""

from __future__ import annotations

import abc
import copy
import typing
from pathlib import Path

import pytest
import torch

from kitae.errors import ConfigError
from kitae.rollout import base
from kitae.rollout.base import ENGINES, SavesState, SyncsWeights
from kitae.rollout.hf import HFEngine
from kitae.rollout.server import ServerEngine
from kitae.rollout.sync import DiskSync, ReloadsWeights, VllmSync
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from kitae.trainer.preflight import check_images
from tests.tiny import tiny_llama, tiny_tokenizer
from tests.plugins.tiny_run import write_config

INSTANCE_LEVEL = [base.RolloutEngine, base.EncodesPrompts, base.ContinuesTokens, base.SamplesInWorker,
                  base.SyncsWeights, base.RemoteLogprobs, base.ReportsStats, base.SavesState, base.ReadsRows]
CLASS_LEVEL = [base.ChecksServers, base.SamplesImages, base.BuiltFromConfig]  # method-only: issubclass works on them


def members(protocol: type) -> set[str]:
    """The names an ability asks for: its methods, properties and annotated attributes, its bases' too."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (typing.Protocol, typing.Generic, abc.ABC, object):
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")} | set(getattr(cls, "__annotations__", {}))
    return names


def implemented(obj: object, name: str) -> bool:
    """``name`` is the object's own (set on the instance) or defined by a class that is not an ability: not the
    ability's stub, which a claim by subclassing would inherit."""
    if name in getattr(obj, "__dict__", {}) and not isinstance(obj, type):
        return True
    owner = next((c for c in type(obj).__mro__ if name in vars(c)), None)
    return owner is not None and owner not in INSTANCE_LEVEL + CLASS_LEVEL


def claimed(cls: type) -> set[type]:
    return {p for p in INSTANCE_LEVEL + CLASS_LEVEL if p in cls.__mro__}


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


# ---- the built-in engines -----------------------------------------------------------------------------------
CLAIMS = [  # (engine, the protocols it claims)
    ("hf", {base.RolloutEngine, base.EncodesPrompts, base.ContinuesTokens, base.SamplesInWorker,
            base.SamplesImages}),
    ("server", {base.RolloutEngine, base.EncodesPrompts, base.ContinuesTokens, base.SyncsWeights,
                base.RemoteLogprobs, base.ReportsStats, base.ChecksServers, base.BuiltFromConfig}),
]


@pytest.mark.parametrize("name,claims", CLAIMS, ids=[n for n, _ in CLAIMS])
def test_each_engine_implements_what_it_claims_and_satisfies_nothing_else(tok, name, claims):
    cls = ENGINES.get(name)
    engine = cls(tiny_llama(len(tok)), tok) if name == "hf" else cls(None, tok, ["http://127.0.0.1:9"])
    assert claimed(cls) == claims
    for protocol in claims:
        missing = [m for m in sorted(members(protocol)) if not implemented(engine, m)]
        assert not missing, f"{cls.__name__} claims {protocol.__name__} but leaves {missing} to its stub"
    for protocol in set(INSTANCE_LEVEL) - claims:
        assert not isinstance(engine, protocol), protocol.__name__  # the trainer would take it for a claim
    for protocol in set(CLASS_LEVEL) - claims:
        assert not issubclass(cls, protocol), protocol.__name__


def test_the_server_engine_keeps_its_own_version_and_frozen_servers_say_so(tok):
    class Pushes:  # a sync strategy with push alone (vLLM's): replicas that miss a push wait for the next
        def push(self, engine, model, version, state=None):
            for r in engine.replicas:
                engine.mark_loaded(r, version, version)

    engine = ServerEngine(None, tok, ["http://127.0.0.1:9", "http://127.0.0.1:10"], weight_sync=Pushes())
    assert not engine.frozen and engine.version is None
    engine.sync_weights(None, 3)
    assert engine.version == 3 and [r.synced for r in engine.replicas] == [3, 3]
    other = ServerEngine(None, tok, ["http://127.0.0.1:9", "http://127.0.0.1:10"], weight_sync=Pushes())
    other.load_synced_state(engine.synced_state())  # what another training process's engine learns
    assert other.version == 3 and [(r.synced, r.server_version) for r in other.replicas] == [(3, 3), (3, 3)]
    assert ServerEngine(None, tok, ["http://127.0.0.1:9"]).frozen  # sync: none


def test_only_the_disk_sync_reloads_a_replica_that_missed_a_push(tmp_path):
    from kitae.rollout.server import ServerSettings

    sampling = ServerSettings("server")
    assert isinstance(DiskSync(sampling, tmp_path), ReloadsWeights)
    assert not isinstance(VllmSync(sampling, tmp_path, engine_cls=object), ReloadsWeights)


# ---- a third party's engines, trained ---------------------------------------------------------------------
class OnlyGenerates:
    """`generate` and nothing else (it samples with the in-process engine's code, out of sight)."""

    def __init__(self, model, tokenizer):
        self._inner = HFEngine(model, tokenizer)
        self.prompts = 0

    def generate(self, prompts, n, sampling):
        self.prompts += len(prompts)
        return self._inner.generate(prompts, n, sampling)


class OwnCopy(OnlyGenerates, SyncsWeights):
    """Samples with its own copy of the policy, which the trainer must push to (every second step)."""

    frozen = False
    sync_every = 2

    def __init__(self, model, tokenizer):
        self.copy = copy.deepcopy(model).requires_grad_(False)
        super().__init__(self.copy, tokenizer)
        self.version: int | None = None
        self.pushed: list[int] = []

    def sync_weights(self, model, version, state=None):
        self.copy.load_state_dict(model.state_dict())
        self.version = version
        self.pushed.append(version)

    def synced_state(self):
        return self.version

    def load_synced_state(self, state):
        self.version = state


class FrozenCopy(OwnCopy):
    frozen = True


class Counts(OnlyGenerates, SavesState):
    """Counts the prompts it sampled, across a resume."""

    def __init__(self, model, tokenizer):
        super().__init__(model, tokenizer)
        self.restored: dict | None = None

    def state_dict(self):
        return {"prompts": self.prompts}

    def load_state_dict(self, state):
        self.restored = dict(state)
        self.prompts = state["prompts"]


def _trainer(tiny_assets: Path, root: Path, scoped_entry, cls: type, **over) -> Trainer:
    name = f"test-{cls.__name__.lower()}"
    scoped_entry(ENGINES, name, cls)  # registered for this test only
    cfg = load_train_config(write_config(tiny_assets, root, **{
        "sampling.engine": name, "optim.steps": 3, "eval.every": 0, "logging.save_every": 0, **over}))
    return Trainer(cfg)


def test_an_engine_with_generate_alone_trains_and_evaluates(tiny_assets, tmp_path, rewards_on_path, scoped_entry):
    trainer = _trainer(tiny_assets, tmp_path, scoped_entry, OnlyGenerates)
    seen = []
    trainer.on_step = lambda step, m: seen.append(m)
    summary = trainer.train()
    assert summary["status"] == "finished" and summary["steps"] == 3
    assert type(trainer.engine) is OnlyGenerates
    assert trainer.engine.prompts == 3 * 2 + 2 * 4  # 3 steps of 2 prompts; evaluations at 0 and 3 of 4 rows
    assert all("sync_secs" not in m and not any(k.startswith("rollout/") for k in m) for m in seen)
    assert all("mismatch/logp_abs_diff_max" not in m for m in seen)  # its log-probs are taken as the trainer's


@pytest.mark.parametrize("over,error", [
    ({"sampling.partial": {"segment_tokens": 4}}, "sampling.partial: the test-onlygenerates engine cannot continue"),
    ({"sampling.async": True}, "sampling.async: samples from token ids, which the test-onlygenerates engine does not"),
], ids=["partial", "async"])
def test_what_needs_token_ids_refuses_an_engine_without_them(tiny_assets, tmp_path, rewards_on_path, scoped_entry,
                                                             over, error):
    with pytest.raises(ConfigError, match=error):
        _trainer(tiny_assets, tmp_path, scoped_entry, OnlyGenerates, **over)


@pytest.mark.parametrize("over,field", [
    ({"model.chat_template_kwargs": {"enable_thinking": False}}, "model.chat_template_kwargs"),
    ({"model.end_marker": "<|im_end|>"}, "model.end_marker"),
], ids=["chat_template_kwargs", "end_marker"])
def test_chat_settings_refuse_an_engine_that_applies_no_chat_template(tiny_assets, tmp_path, rewards_on_path,
                                                                      scoped_entry, over, field):
    """An engine without EncodesPrompts never hears of them: the run would sample without what the user set."""
    with pytest.raises(ConfigError, match=f"{field}: the test-onlygenerates engine does not apply the chat template"):
        _trainer(tiny_assets, tmp_path, scoped_entry, OnlyGenerates, **over)


class TokensHere(OnlyGenerates, base.ContinuesTokens):
    """Samples from token ids with the trainer's model, but cannot be built over the rollout worker's copy of the
    policy (not SamplesInWorker) nor take pushed weights (not SyncsWeights)."""

    end_marker = None

    def set_chat(self, chat_template_kwargs=None, end_marker=None):
        self._inner.set_chat(chat_template_kwargs, end_marker)

    def encode_prompt(self, messages):
        return self._inner.encode_prompt(messages)

    def ending(self, sampling):
        return self._inner.ending(sampling)

    def generate_tokens(self, prompt_ids, n, sampling):
        return self._inner.generate_tokens(prompt_ids, n, sampling)


def test_async_refuses_an_engine_neither_built_in_the_worker_nor_synced(tiny_assets, tmp_path, rewards_on_path,
                                                                        scoped_entry):
    with pytest.raises(ConfigError, match="sampling.async: the test-tokenshere engine .* can neither be built in the "
                                          "rollout worker"):
        _trainer(tiny_assets, tmp_path, scoped_entry, TokensHere, **{"sampling.async": True})


def test_an_engine_that_syncs_weights_gets_the_policys_when_due(tiny_assets, tmp_path, rewards_on_path, scoped_entry):
    trainer = _trainer(tiny_assets, tmp_path, scoped_entry, OwnCopy)
    seen = []
    trainer.on_step = lambda step, m: seen.append(m)
    trainer.train()
    engine = trainer.engine
    assert engine.pushed == [0, 2, 3]  # at the start, every 2nd step, and before the last step's evaluation
    assert engine.version == 3 and ["sync_secs" in m for m in seen] == [False, True, False]
    for (name, mine), theirs in zip(trainer.policy.state_dict().items(), engine.copy.state_dict().values()):
        assert torch.equal(mine, theirs), name  # it holds the trained policy


def test_a_frozen_engine_is_never_pushed_and_evaluations_sample_the_policy(tiny_assets, tmp_path, rewards_on_path,
                                                                          scoped_entry):
    trainer = _trainer(tiny_assets, tmp_path, scoped_entry, FrozenCopy)
    trainer.train()
    assert trainer.engine.pushed == [] and trainer.engine.version is None
    assert trainer.engine.prompts == 3 * 2  # the evaluations sampled with the policy in this process
    assert type(trainer.engine_sync.eval_engine(trainer.policy, trainer.tokenizer)) is HFEngine


def test_an_engines_own_state_is_checkpointed_and_given_back_on_resume(tiny_assets, tmp_path, rewards_on_path,
                                                                      scoped_entry):
    over = {"optim.steps": 2, "logging.save_every": 2, "data.eval": None}
    trainer = _trainer(tiny_assets, tmp_path, scoped_entry, Counts, **over)
    trainer.train()
    assert trainer.engine.prompts == 4 and trainer.engine.restored is None
    cfg = load_train_config(trainer.run_dir / "config.yaml", ["optim.steps=3"])
    cfg.output_dir, cfg.name = str(trainer.run_dir.parent), trainer.run_dir.name
    resumed = Trainer(cfg, resume=True)
    assert resumed.engine.restored == {"prompts": 4}
    resumed.train()
    assert resumed.engine.prompts == 6


@pytest.mark.parametrize("registered,refused", [(HFEngine, False), (ServerEngine, True), (OnlyGenerates, True),
                                                (None, True)], ids=["hf", "server", "generate-only", "unknown"])
def test_image_prompts_take_the_in_process_engine_whatever_its_name(tiny_assets, tmp_path, scoped_entry, registered,
                                                                    refused):
    if registered is None:  # an engine name nothing registered is refused as the config is read
        with pytest.raises(ConfigError, match="sampling.engine: unknown rollout engine 'mine'"):
            load_train_config(write_config(tiny_assets, tmp_path, **{"sampling.engine": "mine"}))
        return
    scoped_entry(ENGINES, "mine", registered)
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{"sampling.engine": "mine"}))
    vision = object()  # a vision-language model's processor: its vision engine takes the in-process engine's place
    if refused:
        with pytest.raises(ConfigError, match="a vision-language model samples in this process"):
            check_images(cfg, vision, [])
    else:
        check_images(cfg, vision, [])


# ---- abilities are claimed by subclassing, never by having the names ----------------------------------------
class LooksLikeEverything:
    """Has every ability's names, subclasses none: it claims nothing (a flag set to False least of all)."""

    remote_logprobs = False
    version = None
    frozen = False
    end_marker = None

    def generate(self, prompts, n, sampling): ...
    def set_chat(self, chat_template_kwargs=None, end_marker=None): ...
    def encode_prompt(self, messages): ...
    def ending(self, sampling): ...
    def generate_tokens(self, prompt_ids, n, sampling): ...
    def on_model(self, model): ...
    def sync_weights(self, model, version, state=None): ...
    def synced_state(self): ...
    def load_synced_state(self, state): ...
    def take_stats(self): ...
    def state_dict(self): ...
    def load_state_dict(self, state): ...
    def generate_rows(self, prompts, rows, n, sampling): ...
    @staticmethod
    def check_servers(sampling): ...
    @classmethod
    def from_config(cls, model, tokenizer, sampling, run_dir, served_models=None): ...
    @classmethod
    def for_images(cls, model, tokenizer, processor): ...


@pytest.mark.parametrize("ability", INSTANCE_LEVEL[1:] + CLASS_LEVEL, ids=lambda a: a.__name__)
def test_an_ability_is_claimed_by_subclassing_it_not_by_having_its_names(ability):
    assert not isinstance(LooksLikeEverything(), ability)
    assert not issubclass(LooksLikeEverything, ability)


def test_a_remote_logprobs_flag_set_to_false_claims_nothing():
    class NotRemote:
        remote_logprobs = False

        def generate(self, prompts, n, sampling): ...

    assert not isinstance(NotRemote(), base.RemoteLogprobs)


def test_every_ability_is_listed_and_named_in_the_module_docstring():
    assert set(base.ABILITIES) == set(INSTANCE_LEVEL[1:] + CLASS_LEVEL)
    for ability in base.ABILITIES:
        assert f":class:`{ability.__name__}`" in base.__doc__, ability.__name__


def test_a_claim_left_unimplemented_is_refused_when_the_engine_is_built():
    class ClaimsState(OnlyGenerates, SavesState):  # no state_dict / load_state_dict
        pass

    with pytest.raises(TypeError, match="abstract"):
        ClaimsState(None, None)


def test_the_server_engine_reads_tokens_with_the_in_process_engines_codec_not_by_inheriting_it(tok):
    from kitae.rollout.codec import TokenCodec

    assert not issubclass(ServerEngine, HFEngine)
    hf, server = HFEngine(tiny_llama(len(tok)), tok), ServerEngine(None, tok, ["http://127.0.0.1:9"])
    assert type(hf.codec) is type(server.codec) is TokenCodec
    messages = [{"role": "user", "content": "2+2?"}]
    assert hf.encode_prompt(messages) == server.encode_prompt(messages)
    sp = base.SamplingParams()
    assert hf.ending(sp) == server.ending(sp) and hf.ending(sp).stop

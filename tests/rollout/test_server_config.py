"""The sampling settings of the server engine: every bad value is a ConfigError naming its key."""

from __future__ import annotations

import pytest

from kitae.errors import ConfigError
from kitae.trainer.config import load_train_config

REWARDS = [{"name": "c", "grader": {"type": "answer"}}]
SERVER = {"engine": "server", "servers": ["http://127.0.0.1:8000"]}


def load(sampling: dict, algorithm: dict | None = None):
    return load_train_config(data={"rewards": REWARDS, "sampling": sampling, "algorithm": algorithm or {}})


@pytest.mark.parametrize("sampling,key,says", [
    ({"engine": "server"}, "sampling.engine.servers", "needs at least one server URL"),  # no servers
    ({"servers": ["http://127.0.0.1:8000"]}, "sampling.servers", "not a setting of engine 'hf'; engine server takes"
     " it"),  # hf engine
    ({"engine": {"type": "hf", "sync": "vllm"}}, "sampling.engine.sync", "not a setting of engine 'hf'; engine "
     "server takes it"),
    ({"engine": {"type": "server", "servers": ["x"]}}, r"sampling.engine.servers\[0\]", "not an http"),
    ({**SERVER, "servers": ["localhost:8000"]}, r"sampling.servers\[0\]", "not an http"),  # no scheme
    ({**SERVER, "sync_every": 0}, "sampling.sync_every", ">= 1"),
    ({**SERVER, "sync_every": 4}, "sampling.max_staleness", "at least 3"),  # every sample of 3 steps dropped
    ({**SERVER, "max_staleness": -1}, "sampling.max_staleness", ">= 0"),
    ({**SERVER, "server_timeout": 0}, "sampling.server_timeout", "> 0"),
    ({**SERVER, "server_max_wait": -1}, "sampling.server_max_wait", "0 = wait forever"),
    ({**SERVER, "sync": "nccl"}, "sampling.sync", "expected one of disk, vllm, none"),
    ({**SERVER, "server_api": "tgi"}, "sampling.server_api", "expected one of openai, sglang"),
])
def test_bad_server_settings(sampling, key, says):
    with pytest.raises(ConfigError, match=rf"^{key}: .*{says}"):
        load(sampling)


def test_good_server_settings():
    cfg = load({**SERVER, "servers": ["http://10.0.0.2:8000/v1/", "http://10.0.0.3:8000"], "sync_every": 4,
                "max_staleness": 3})
    assert cfg.sampling.engine.servers == ["http://10.0.0.2:8000", "http://10.0.0.3:8000"]  # normalized
    assert load({**SERVER, "sync": "none", "sync_every": 5}).sampling.max_staleness == 0  # frozen: no versions
    assert cfg.algorithm.tis_cap == 2.0


@pytest.mark.parametrize("cap,ok", [(None, True), (1.0, True), (3.0, True), (0.5, False)])
def test_tis_cap(cap, ok):
    if ok:
        assert load(SERVER, {"tis_cap": cap}).algorithm.tis_cap == cap
    else:
        with pytest.raises(ConfigError, match=r"^algorithm.tis_cap: must be >= 1"):
            load(SERVER, {"tis_cap": cap})


def test_resume_takes_new_server_addresses_without_allow_config_change(tmp_path):
    from kitae.trainer.resume import check_config_changes, config_changes

    old = load(SERVER).to_dict()
    moved = load({**SERVER, "servers": ["http://127.0.0.1:9001", "http://127.0.0.1:9002"], "server_timeout": 60})
    check_config_changes(config_changes(old, moved.to_dict()), allow=False, run_dir=tmp_path)  # no error
    other = load({**SERVER, "sync_every": 2, "max_staleness": 1}).to_dict()  # how the run trains: still asked
    with pytest.raises(ConfigError, match="allow-config-change"):
        check_config_changes(config_changes(old, other), allow=False, run_dir=tmp_path)


def test_the_server_settings_read_the_same_beside_the_engine_or_under_it():
    flat = load({**SERVER, "sync": "none", "server_timeout": 60})
    nested = load({"engine": {"type": "server", "servers": ["http://127.0.0.1:8000"], "sync": "none",
                              "server_timeout": 60}})
    assert type(flat.sampling.engine).__name__ == "ServerSettings" and flat.sampling == nested.sampling
    assert flat.to_dict()["sampling"]["engine"] == {**nested.to_dict()["sampling"]["engine"], "type": "server"}
    assert load_train_config(data=flat.to_dict()).sampling == flat.sampling  # a saved run's config reads back


OLD_SERVER_KEYS = {  # what kitae saved in every run's config before the server settings moved beside the engine
    "servers": [], "server_api": "openai", "api_key_env": "KITAE_SERVE_TOKEN", "server_timeout": 600.0,
    "server_down_secs": 30.0, "server_max_wait": 1800.0, "sync": "disk", "sync_every": 1, "sync_dir": None,
    "lora_sync": "adapter"}


def test_a_config_saved_by_an_older_kitae_still_loads():
    hf = load({"engine": "hf", **OLD_SERVER_KEYS, "max_staleness": 0, "async": False})
    assert hf.sampling.engine.type == "hf" and hf.sampling == load({}).sampling
    server = load({**OLD_SERVER_KEYS, **SERVER, "sync_every": 2, "max_staleness": 1})
    assert server.sampling.engine.sync_every == 2 and server.sampling.engine.servers == SERVER["servers"]


def test_each_engine_registers_its_settings_with_its_entry():
    from kitae.rollout.base import ENGINES, EngineSettings, InProcessSettings
    from kitae.rollout.server import ServerSettings

    assert ENGINES.settings_class("server") is ServerSettings and ENGINES.settings_class("hf") is InProcessSettings
    assert issubclass(ServerSettings, EngineSettings) and ServerSettings.on_servers and InProcessSettings.in_process
    assert type(load({}).sampling.engine) is InProcessSettings

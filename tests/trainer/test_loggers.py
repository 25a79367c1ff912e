"""report_to: optional copies of the metrics through accelerate's trackers, for TensorBoard (tested for real: the event
files read back), W&B (offline, when installed) and trackio."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from kitae.errors import ConfigError
from kitae.trainer.config import load_train_config
from kitae.trainer.loggers import LOGGERS, Loggers, flat_config, make_loggers, register_logger


def scalars(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}, acc


def hparams(logdir):
    """The hparams TensorBoard shows for the run in `logdir` (from the event file accelerate writes beside it)."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams import metadata

    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    [tags] = [tags for tags in mux.PluginRunToTagToContent(metadata.PLUGIN_NAME).values()
              if metadata.SESSION_START_INFO_TAG in tags]
    info = metadata.parse_session_start_info_plugin_data(tags[metadata.SESSION_START_INFO_TAG])
    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in info.hparams.items()}


def test_tensorboard_gets_every_number_and_evals_under_eval(tmp_path):
    pytest.importorskip("tensorboard", reason="pip install tensorboard to test the TensorBoard logger")
    with make_loggers(["tensorboard"], tmp_path, {"name": "t", "lr": 1e-6}) as logger:
        for step in (1, 2, 3):
            logger.log(step, {"reward": step / 10, "kl": None, "entropy": float("nan"), "ok": True})
        logger.log_eval(2, {"pass@1": 0.5})
        logger.log(4, {"grader/answer/abstained": 2})  # a component's counter, slashes and all
    got, _ = scalars(tmp_path / "tensorboard")
    assert got == {"reward": [(1, 0.1), (2, 0.2), (3, 0.3)], "eval/pass@1": [(2, 0.5)],  # None, NaN, bool left out
                   "grader/answer/abstained": [(4, 2.0)]}
    assert hparams(tmp_path / "tensorboard") == {"name": "t", "lr": 1e-6}


def test_tensorboard_shows_a_whole_train_config_as_hparams(tmp_path):
    pytest.importorskip("tensorboard", reason="pip install tensorboard to test the TensorBoard logger")
    config = load_train_config(data={"name": "hp", "rewards": [{"grader": {"type": "answer"}}],
                                     "algorithm": {"loss": "dapo"}}).to_dict()
    make_loggers(["tensorboard"], tmp_path, config).close()
    shown = hparams(tmp_path / "tensorboard")
    assert shown["algorithm.loss.type"] == "dapo" and shown["name"] == "hp"
    assert shown["optim.betas"] == "[0.9, 0.99]"  # a list as text: hparams take scalars only
    assert set(shown) == {k for k, v in flat_config(config).items() if v is not None}  # None: no hparam


@pytest.mark.parametrize("config, flat", [
    ({}, {}),
    ({"a": 1, "b": None}, {"a": 1, "b": None}),  # scalars and None stay
    ({"a": {"b": {"c": "x"}}, "d": True}, {"a.b.c": "x", "d": True}),  # nested keys joined with dots
    ({"rewards": [{"grader": {"type": "answer"}}]}, {"rewards": '[{"grader": {"type": "answer"}}]'}),  # JSON text
    ({"a": {}}, {}),  # an empty section leaves nothing
    ({"name": "評価"}, {"name": "評価"}),
    ({"langs": ["ja"]}, {"langs": '["ja"]'}),  # not escaped to \\u
])
def test_flat_config(config, flat):
    assert flat_config(config) == flat


@pytest.mark.parametrize("report_to", [[], ["none"], None, "none"])
def test_nothing_to_report_is_a_logger_that_does_nothing(tmp_path, report_to):
    with make_loggers(report_to, tmp_path) as logger:
        logger.log(1, {"reward": 1.0})
        assert logger.loggers == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("report_to, message", [
    (["tensorboard", "tensorbord"], "logging.report_to[1]: unknown report_to logger 'tensorbord'; "
                                    "did you mean 'tensorboard'?"),
    (["all"], "logging.report_to[0]: unknown report_to logger 'all'"),
    (["tensorboard", "tensorboard"], "logging.report_to: a backend is named twice"),
])
def test_bad_names_are_config_errors(tmp_path, report_to, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        make_loggers(report_to, tmp_path)


@pytest.mark.parametrize("name", ["wandb", "trackio"])
def test_a_missing_package_names_the_extra(tmp_path, name):
    if importlib.util.find_spec(name) is not None:
        pytest.skip(f"{name} is installed here")
    with pytest.raises(ConfigError, match=re.escape(f"pip install 'kitae[{name}]'")):
        make_loggers([name], tmp_path)


def test_a_missing_tensorboard_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # what an environment without it imports
    with pytest.raises(ConfigError, match=re.escape("pip install 'kitae[tensorboard]'")):
        make_loggers(["tensorboard"], tmp_path)


def test_wandb_offline(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb", reason="W&B is not installed (pip install wandb); documented, not tested")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with make_loggers(["wandb"], tmp_path, {"name": "offline-run"}) as logger:
        logger.log(1, {"reward": 0.5})
        logger.log_eval(1, {"pass@1": 0.25})
        assert wandb.run.name == "offline-run"
    assert list((tmp_path / "wandb").glob("offline-run-*"))


class Recorder:
    def __init__(self, run_dir, config, fail_on_close=False):
        self.calls, self.fail_on_close = [], fail_on_close

    def log(self, step, metrics):
        self.calls.append(("log", step, metrics))

    def log_eval(self, step, metrics):
        self.calls.append(("eval", step, metrics))

    def close(self):
        self.calls.append(("close",))
        if self.fail_on_close:
            raise RuntimeError("disk full")


def test_every_logger_is_closed_even_when_one_fails(tmp_path):
    first, second = Recorder(tmp_path, {}, fail_on_close=True), Recorder(tmp_path, {})
    logger = Loggers([first, second])
    logger.log(3, {"reward": 1, "flag": True, "kl": None})
    with pytest.raises(RuntimeError, match="disk full"):
        logger.close()
    assert first.calls == second.calls == [("log", 3, {"reward": 1.0}), ("close",)]


def test_a_registered_backend_is_used_by_name(tmp_path):
    with LOGGERS.scoped("test_recorder"):
        register_logger("test_recorder")(Recorder)
        logger = make_loggers(["test_recorder"], tmp_path)
        logger.log_eval(5, {"pass@1": 0.5})
        assert logger.loggers[0].calls == [("eval", 5, {"pass@1": 0.5})]

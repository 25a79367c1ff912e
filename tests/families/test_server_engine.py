"""The server rollout engine (`sampling.engine: server`) against `kitae serve model` on 127.0.0.1, with families
that are not ChatML: samples stop at every end id of the model, end at its own end of turn, and the graders and
reward functions of a training run see the text up to it."""

from __future__ import annotations

import threading

import httpx
import pytest
import torch

from kitae.chat import to_messages
from kitae.rewards.graders import TemplateGrader
from kitae.rewards.chat_template import TemplateConfig
from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine
from kitae.rollout.server import SERVER_APIS, ServerEngine
from kitae.scoring.sample_and_grade import sample_dict
from kitae.serving.server import load_service, make_server
from kitae.store import RunStore
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests import reward_functions
from tests.plugins.tiny_run import write_config


class Script:
    """Hooks that make a model say a chain of tokens, whatever the batch: the next token is ``chain[last input
    token]`` (rows are left-padded, so the last position is the row's last token), ``then`` after any other."""

    def __init__(self, model, chain: dict[int, int], then: int):
        self.chain, self.then, self.last = chain, then, None
        self.handles = [model.get_input_embeddings().register_forward_pre_hook(self.read),
                        model.get_output_embeddings().register_forward_hook(self.say)]

    def read(self, _module, args):
        self.last = args[0][:, -1].tolist()  # [B]

    def say(self, _module, _inputs, logits):
        forced = torch.full_like(logits, -1e4)  # [B, T, V]
        for row, tok in enumerate(self.last):
            forced[row, ..., self.chain.get(tok, self.then)] = 0.0
        return forced

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def saying(service, prompt_last: int, tokens: list[int], then: int | None = None) -> Script:
    """The served model answers every prompt ending in ``prompt_last`` with ``tokens`` (distinct ids), then
    ``then`` (by default the last token again)."""
    chain = dict(zip([prompt_last, *tokens[:-1]], tokens))
    return Script(service.engine.model, chain, tokens[-1] if then is None else then)


@pytest.fixture
def serve(family_dirs):
    """serve(name) -> (service, URL): the family's tiny model behind `kitae serve model`'s HTTP server."""
    started = []

    def start(name: str):
        service = load_service(str(family_dirs[name]), name=name, default_max_tokens=8)
        server = make_server(service, port=0)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append((server, service))
        return service, f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server, service in started:
        server.shutdown()
        server.server_close()
        service.close()


def _words(tok, text: str) -> list[int]:
    ids = tok.encode(text, add_special_tokens=False)
    assert len(set(ids)) == len(ids)
    return ids


@pytest.mark.parametrize("name", ["llama3", "gemma3", "mistral"])
def test_server_samples_stop_at_every_end_id_and_end_at_the_model_s_turn_end(serve, name):
    service, url = serve(name)
    tok, end = service.engine.tokenizer, service.engine.end_marker
    engine = ServerEngine(None, tok, [url])
    prompt = engine.encode_prompt(to_messages("hi"))
    assert prompt == service.engine.encode_prompt(to_messages("hi"))
    word = _words(tok, "hello")
    template = TemplateGrader(TemplateConfig(min_chars=1))
    for end_id, end_text in zip(end.ids, end.texts):
        script = saying(service, prompt[-1], [*word, end_id], then=word[0])  # a server going on says more
        try:
            sp = SamplingParams(max_new_tokens=8, seed=3)
            [group] = engine.generate([to_messages("hi")], 2, sp)
            body = SERVER_APIS.get("openai").build(prompt, 1, engine.ending(sp), None)
            [raw] = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"]
        finally:
            script.remove()
        assert raw["logprobs"]["tokens"] == [f"token_id:{t}" for t in [*word, end_id]], name  # the server stopped
        assert raw["finish_reason"] == "stop"
        for c in group:
            assert (c.completion_ids, c.finish_reason, c.text) == ([*word, end_id], "stop", "hello" + end_text), name
            assert c.end_marker == end.text
            s = sample_dict(c, 8)
            assert template.grade_sample({}, s).sub_scores["compliant"] == float(end_text == end.text)


def test_a_stray_control_token_from_the_server_breaks_the_template(serve):
    service, url = serve("llama3")
    tok = service.engine.tokenizer
    engine = ServerEngine(None, tok, [url])
    prompt = engine.encode_prompt(to_messages("hi"))
    header, eot = tok.convert_tokens_to_ids(["<|start_header_id|>", "<|eot_id|>"])
    script = saying(service, prompt[-1], [*_words(tok, "hello"), header, eot])
    try:
        [[c]] = engine.generate([to_messages("hi")], 1, SamplingParams(max_new_tokens=8))
    finally:
        script.remove()
    assert c.text == "hello<|start_header_id|><|eot_id|>"
    grade = TemplateGrader(TemplateConfig(min_chars=1)).grade_sample({}, sample_dict(c, 8))
    assert grade.reason == "stray template token <|start_header_id|>"


def test_two_grpo_steps_through_kitae_serve_model_with_a_llama3_model(serve, family_dirs, tmp_path, monkeypatch):
    """Training against the server: the samples stop at <|eot_id|>, the template reward sees a turn that ended,
    a reward function sees the content without the marker, and the weights are pushed to the server."""
    service, url = serve("llama3")
    tok = service.engine.tokenizer
    folder = family_dirs["llama3"]
    prompt_end = HFEngine(None, tok).encode_prompt(to_messages("x"))[-1]  # every prompt ends with its header
    script = saying(service, prompt_end, [*_words(tok, "hello"), tok.convert_tokens_to_ids("<|eot_id|>")])
    seen: list[str] = []  # what tests.reward_functions:seen is given
    monkeypatch.setattr(reward_functions, "SEEN", seen)
    cfg = load_train_config(write_config(folder.parent, tmp_path, **{
        "model.path": str(folder), "data.train": str(folder.parent / "train.jsonl"), "eval.every": 0,
        "sampling.engine": "server", "sampling.servers": [url], "sampling.sync": "disk",
        "sampling.server_down_secs": 60.0, "sampling.server_max_wait": 120.0,
        "sampling.group_size": 2, "sampling.max_new_tokens": 6, "optim.steps": 2, "logging.save_every": 0,
        "rewards": [{"name": "seen", "function": "tests.reward_functions:seen"},
                    {"name": "template", "grader": {"type": "template", "min_chars": 1, "full_chars": 0}}],
    }))
    try:
        summary = Trainer(cfg).train()
    finally:
        script.remove()
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert seen and set(seen) == {"hello"}
    store = RunStore.open(cfg.run_dir)
    rows = [s for step in (1, 2) for g in store.groups(step=step, with_samples=True) for s in g.samples]
    assert rows and all((s.text, s.finish_reason) == ("hello<|eot_id|>", "stop") for s in rows)
    assert all(s.scores["template"] == 1.0 for s in rows)
    assert service.gate.version is not None and service.gate.version >= 1  # the trainer pushed its weights


def test_server_request_bodies_carry_the_model_s_end_texts(family_dirs):
    from kitae.models import load_tokenizer

    tok = load_tokenizer(family_dirs["llama3"])
    engine = ServerEngine(None, tok, ["http://127.0.0.1:9"])
    body = SERVER_APIS.get("openai").build([1, 2], 2, engine.ending(SamplingParams()), None)
    assert {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"} <= set(body["stop"])


def test_the_server_engine_applies_model_chat_template_kwargs_to_the_prompt_it_sends(serve):
    """vLLM's completions API has no chat_template_kwargs (tests/contracts): the engine renders Qwen3's
    enable_thinking switch into the prompt's ids, as the in-process engine does."""
    service, url = serve("qwen3")
    tok = service.engine.tokenizer
    engine = ServerEngine(None, tok, [url])
    engine.set_chat({"enable_thinking": False})
    [[c]] = engine.generate([to_messages("hi")], 1, SamplingParams(max_new_tokens=2, seed=0))
    assert tok.decode(c.prompt_ids).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    local = HFEngine(None, tok)
    local.set_chat({"enable_thinking": False})
    assert c.prompt_ids == local.encode_prompt(to_messages("hi"))

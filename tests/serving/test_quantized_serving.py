"""`kitae serve rm --quantize` and `kitae serve model -m ADAPTER` as real processes: a reward model in 4 bits
scores as the full one does (to quantization error), and a QLoRA adapter folder is served over its base,
quantized as it was trained (kitae_adapter.json)."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading

import httpx
import pytest

from kitae.errors import ConfigError

pytest.importorskip("bitsandbytes")
pytestmark = pytest.mark.slow

TEXTS = ["12+35=47", "hello there", "48", "the answer is 47"]


def serve(*args: str) -> tuple[subprocess.Popen, str]:
    """Start `kitae serve ARGS --port 0`; (process, URL) once it prints the line scripts wait for."""
    cmd = [sys.executable, "-m", "kitae.cli.main", "serve", *args, "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=os.environ | {"PYTHONUNBUFFERED": "1"})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen = []
    while True:
        try:
            line = lines.get(timeout=180)
        except queue.Empty:
            proc.kill()
            raise AssertionError(f"kitae serve printed no URL in 180 s: {seen[-5:]}")
        seen.append(line)
        if ": serving " in line:
            return proc, line.strip().rsplit(" on ", 1)[1]
        if proc.poll() is not None:
            raise AssertionError("".join(seen[-20:]))


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=30)


def test_serve_rm_quantize_scores_as_the_full_model_does():
    from kitae.rewards.reward_model import LocalRewardModel

    full = LocalRewardModel("bundled").score_texts(TEXTS)
    proc, url = serve("rm", "--model", "bundled", "--quantize", "nf4")
    try:
        got = httpx.post(f"{url}/v1/score", json={"texts": TEXTS}, timeout=60).json()
    finally:
        stop(proc)
    scores = got["scores"]
    spread = max(full) - min(full)
    assert all(abs(a - b) < 0.1 * spread for a, b in zip(scores, full)), (scores, full)
    assert scores != full  # the weights were quantized


def test_the_reward_models_layers_are_4bit_and_its_score_head_is_not():
    import bitsandbytes as bnb

    from kitae.quantization import from_flag
    from kitae.rewards.reward_model import LocalRewardModel

    model = LocalRewardModel("bundled", quantization=from_flag("nf4")).model
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    assert not isinstance(model.score, bnb.nn.Linear4bit)


def test_serve_model_serves_a_qlora_adapter_folder(tmp_path):
    """An adapter saved as a QLoRA run saves it (kitae.trainer.checkpoint.save_model) served by folder."""
    import peft

    from kitae.models import BUNDLED_MODEL, load_causal_lm, load_tokenizer
    from kitae.quantization import QuantizationConfig
    from kitae.trainer.checkpoint import save_model

    q = QuantizationConfig(bits=4, type="nf4")
    model = peft.get_peft_model(load_causal_lm(BUNDLED_MODEL, quantization=q),
                                peft.LoraConfig(r=2, target_modules=["q_proj"]))
    save_model(tmp_path / "adapter", model, load_tokenizer(BUNDLED_MODEL), base_folder=BUNDLED_MODEL, quantization=q)
    proc, url = serve("model", "--model", str(tmp_path / "adapter"))
    try:
        reply = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "what is 2+3?"}], "max_tokens": 4, "temperature": 0})
    finally:
        stop(proc)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] is not None


def test_an_adapter_folder_loads_quantized_as_it_was_trained(tmp_path):
    import bitsandbytes as bnb
    import peft

    from kitae.models import BUNDLED_MODEL, load_causal_lm, load_tokenizer
    from kitae.quantization import QuantizationConfig
    from kitae.trainer.checkpoint import save_model

    q = QuantizationConfig(bits=8)
    model = peft.get_peft_model(load_causal_lm(BUNDLED_MODEL), peft.LoraConfig(r=2, target_modules=["q_proj"]))
    save_model(tmp_path / "adapter", model, load_tokenizer(BUNDLED_MODEL), base_folder=BUNDLED_MODEL, quantization=q)
    loaded = load_causal_lm(tmp_path / "adapter")
    assert isinstance(loaded, peft.PeftModel)
    assert any(isinstance(m, bnb.nn.Linear8bitLt) for m in loaded.modules())


def test_a_reward_model_grader_loads_its_model_quantized_and_scores_as_the_full_model_does():
    """`type: reward_model` with `quantize: nf4` (the in-process reward model, as `serve rm --quantize`)."""
    import bitsandbytes as bnb

    from kitae.graders.spec import build_grader

    full = build_grader({"type": "reward_model", "model": "bundled"}, "g")
    four = build_grader({"type": "reward_model", "model": "bundled", "quantize": "nf4"}, "g")
    scorer = four.scorer  # loaded on first use, as a run does
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in scorer.model.modules())
    a, b = full.scorer.score_texts(TEXTS), scorer.score_texts(TEXTS)
    spread = max(a) - min(a)
    assert all(abs(x - y) < 0.1 * spread for x, y in zip(a, b)) and a != b
    with pytest.raises(ConfigError, match="quantize"):
        build_grader({"type": "reward_model", "url": "http://127.0.0.1:9", "quantize": "nf4"}, "g")

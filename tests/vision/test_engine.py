"""The rollout engine on the bundled kitae-tiny-vl: images go in at prefill, log-probs match a separate forward
with the same images, left-padded batches sample what prompts alone do, LoRA adapts the language part only."""

from __future__ import annotations

import pytest
import torch

from kitae.rollout.base import SamplingParams
from kitae.trainer.batch import build_batch, token_logps


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)  # restored by tests/conftest.py


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_a_separate_forward_with_the_same_images(vl_engine, vision_rows, temperature):
    rows = vision_rows[:3]
    groups = vl_engine.generate([r["messages"] for r in rows], 3, SamplingParams(temperature, max_new_tokens=12,
                                                                                 seed=5))
    comps = [c for g in groups for c in g]
    assert all(c.image_inputs["pixel_values"].shape == (1, 3, 48, 48) for c in comps)
    assert groups[0][0].image_inputs is groups[0][1].image_inputs  # one prompt's samples share its tensors
    batch = build_batch(comps, [0.0] * len(comps), vl_engine.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = token_logps(vl_engine.model, batch, temperature)  # right-padded, all rows at once
    assert torch.allclose(logp * batch.mask, batch.old_logp, atol=1e-4)
    batch.image_inputs = None  # the same tokens without the pictures: the model reads its <image> tokens only
    with torch.no_grad():
        blind, _ = token_logps(vl_engine.model, batch, temperature)
    assert ((blind - batch.old_logp) * batch.mask).abs().max() > 0.05


def test_logprobs_equal_the_model_called_directly_on_each_picture(vl_engine, vision_rows):
    """Outside kitae's batching: the processor makes each row's pixels from its file, the model reads prompt plus
    sample in one call, and log_softmax at the sampled tokens gives the engine's numbers (each row its own image)."""
    from kitae.data.images import open_image

    rows = vision_rows[:4]
    groups = vl_engine.generate([r["messages"] for r in rows], 2, SamplingParams(1.0, max_new_tokens=8, seed=3))
    for row, group in zip(rows, groups):
        pixels = vl_engine.processor.image_processor(open_image(row["images"][0]), return_tensors="pt")
        for c in group:
            ids = torch.tensor([c.prompt_ids + c.completion_ids])  # [1, P+T]
            with torch.no_grad():
                logits = vl_engine.model(input_ids=ids, pixel_values=pixels["pixel_values"]).logits[0]  # [P+T, V]
            P, T = len(c.prompt_ids), len(c.completion_ids)
            direct = torch.log_softmax(logits[P - 1 : P + T - 1], -1).gather(-1, ids[0, P:, None])[:, 0]  # [T]
            assert torch.allclose(direct, torch.tensor(c.logprobs), atol=1e-4)


def test_packed_update_logprobs_equal_the_engines_with_the_images(vl_engine, vision_rows):
    """The update packs a prompt's samples into one sequence (kitae.trainer.batch.pack): the picture's tokens sit
    in the shared prefix once and the family's image tensors go with it, so each sample gets the engine's
    log-probs; without the images it would not."""
    from kitae.trainer.batch import packed_logps, packed_micro_batches

    rows = vision_rows[:3]
    groups = vl_engine.generate([r["messages"] for r in rows], 4, SamplingParams(1.0, max_new_tokens=10, seed=2))
    comps = [c for g in groups for c in g]
    batch = build_batch(comps, [1.0] * len(comps), vl_engine.tokenizer.pad_token_id)
    chunks = packed_micro_batches(batch, list(range(len(batch))), group_size=4, max_rows=6)
    assert any(len(c.index) > c.input_ids.shape[0] for c in chunks)  # some rows really share a sequence
    for pb in chunks:
        assert len(pb.image_inputs) == pb.input_ids.shape[0]  # one prompt's pictures per packed sequence
        with torch.no_grad():
            logp, _ = packed_logps(vl_engine.model, pb)
        old = batch.old_logp[pb.index, : logp.shape[1]]
        assert torch.allclose(logp, old * pb.rows.mask, atol=1e-4)
        pb.image_inputs = None
        with torch.no_grad():
            blind, _ = packed_logps(vl_engine.model, pb)
        assert ((blind - old) * pb.rows.mask).abs().max() > 0.05


def test_a_batch_of_8_samples_greedily_what_each_prompt_alone_does(vl_engine, vision_rows):
    rows = vision_rows[:8]  # questions of different lengths: left padding differs per row
    assert len({len(vl_engine.encode_prompt(r["messages"])) for r in rows}) > 1
    sp = SamplingParams(temperature=0, max_new_tokens=10)
    batched = [g[0] for g in vl_engine.generate([r["messages"] for r in rows], 1, sp)]
    alone = [vl_engine.generate([r["messages"]], 1, sp)[0][0] for r in rows]
    assert [c.completion_ids for c in batched] == [c.completion_ids for c in alone]
    for a, b in zip(batched, alone):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_the_picture_changes_the_answer(vl_engine, vision_rows):
    """Two prompts with the same question and different pictures get different next-token distributions."""
    by_text = {}
    for r in vision_rows:
        by_text.setdefault(r["messages"][-1]["content"][-1]["text"], []).append(r)
    a, b = next(v for v in by_text.values() if len(v) >= 2 and v[0]["reference_answer"] != v[1]["reference_answer"])[:2]
    sp = SamplingParams(temperature=1.0, max_new_tokens=1, seed=0)
    ca, cb = (vl_engine.generate([r["messages"]], 1, sp)[0][0] for r in (a, b))
    assert ca.prompt_ids == cb.prompt_ids and not torch.equal(ca.image_inputs["pixel_values"],
                                                              cb.image_inputs["pixel_values"])
    batch = build_batch([ca, cb], [0.0, 0.0], vl_engine.tokenizer.pad_token_id)
    with torch.no_grad():
        out = vl_engine.model(input_ids=batch.input_ids[:, : len(ca.prompt_ids)], **batch.model_inputs())
    assert (out.logits[0, -1] - out.logits[1, -1]).abs().max() > 0.1


def test_lora_adapts_the_language_part_only(vision_rows):
    import peft

    from kitae.models import language_targets, load_causal_lm, load_processor
    from kitae.rollout.vision import VisionEngine

    model = load_causal_lm("kitae-tiny-vl")
    targets = language_targets(model, ["q_proj", "v_proj"])
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets,
                                                       task_type="CAUSAL_LM"))
    adapted = [n for n, _ in model.named_parameters() if "lora_" in n]
    assert adapted and all("language_model" in n for n in adapted)
    assert any(".self_attn.q_proj" in n for n in adapted)
    engine = VisionEngine(model, None, load_processor("kitae-tiny-vl"))
    comps = [c for g in engine.generate([vision_rows[0]["messages"]], 2, SamplingParams(max_new_tokens=6, seed=1))
             for c in g]
    batch = build_batch(comps, [1.0, -1.0], engine.tokenizer.pad_token_id)
    logp, _ = token_logps(model, batch)
    assert torch.allclose(logp * batch.mask, batch.old_logp, atol=1e-4)  # LoRA starts as the identity
    (logp * batch.mask).sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert set(grads) == set(adapted) and any(g is not None and g.abs().sum() > 0 for g in grads.values())

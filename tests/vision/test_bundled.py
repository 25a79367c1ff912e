"""The bundled kitae-tiny-vl and vision task: small, offline, loadable the standard way, held-out split apart."""

from __future__ import annotations

import json

import torch

from kitae.chat import IM_END, chatml
from kitae.models import BUNDLED_VL, MASKED_LOGIT, is_vision_model
from kitae.trainer.config import resolve_data_path

DATA = BUNDLED_VL.parents[1] / "data" / "vision"
README = BUNDLED_VL.parents[3] / "README.md"


def test_the_model_is_small_and_the_task_images_few_megabytes():
    size = sum(f.stat().st_size for f in BUNDLED_VL.iterdir())
    assert size <= 20 * 2**20, size
    images = sum(f.stat().st_size for f in (DATA / "images").iterdir())
    assert images <= 3 * 2**20, images
    assert is_vision_model("kitae-tiny-vl") and not is_vision_model("bundled")
    config = json.loads((BUNDLED_VL / "config.json").read_text())
    assert config["model_type"] == "llava" and config["vision_config"]["model_type"] == "siglip_vision_model"
    assert (BUNDLED_VL / "README.md").read_text().startswith("# kitae-tiny-vl")


def test_it_loads_with_auto_classes_offline_and_reads_chatml_with_images(vl_engine):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(BUNDLED_VL, local_files_only=True)
    model = AutoModelForImageTextToText.from_pretrained(BUNDLED_VL, local_files_only=True)
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    tok = processor.tokenizer
    assert tok.eos_token == IM_END and len(tok.encode("<image>", add_special_tokens=False)) == 1
    text_only = [{"role": "user", "content": "hello"}]
    assert processor.apply_chat_template(text_only, tokenize=False, add_generation_prompt=True) == chatml(text_only)
    with_image = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour?"}]}]
    rendered = processor.apply_chat_template(with_image, tokenize=False, add_generation_prompt=True)
    assert rendered == "<|im_start|>user\n<image>What colour?<|im_end|>\n<|im_start|>assistant\n"
    picture = {"type": "image", "image": str(DATA / "images" / "test-0000.png")}
    ids, images = vl_engine.encode([{"role": "user", "content": [picture, with_image[0]["content"][1]]}])
    assert ids.count(tok.convert_tokens_to_ids("<image>")) == model.config.image_seq_length == 9
    assert images["pixel_values"].shape == (1, 3, 48, 48) and images["pixel_values"].abs().max() <= 1.0
    with torch.no_grad():
        same = model(input_ids=torch.tensor([ids]), **images).logits
        engine = vl_engine.model(input_ids=torch.tensor([ids]), **images).logits
    placeholder = model.config.image_token_id
    assert (engine[..., placeholder] == MASKED_LOGIT).all()  # kitae never samples the image placeholder
    keep = torch.arange(same.shape[-1]) != placeholder
    assert torch.allclose(same[..., keep], engine[..., keep])  # every other logit is the plain model's
    params = f"{sum(p.numel() for p in model.parameters()):,}"  # the size the README and the model card give
    assert params in (BUNDLED_VL / "README.md").read_text() and params in README.read_text()


def test_the_held_out_split_shares_no_picture_with_training():
    def pictures(split):
        rows = [json.loads(line) for line in open(resolve_data_path(f"bundled:vision/{split}"), encoding="utf-8")]
        return {((DATA / r["messages"][0]["content"][0]["image"]).read_bytes(), r["messages"][0]["content"][1]["text"])
                for r in rows}

    assert not pictures("train") & pictures("test")

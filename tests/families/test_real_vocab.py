"""Llama 3 with its real vocabulary (from the llama-models package, offline): Meta's own token ids for a prompt,
the end marker from its chat template and eos list, and sampling that stops at each end id."""

from __future__ import annotations

import pytest
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from kitae.chat import end_marker_of, to_messages
from kitae.models import load_causal_lm, load_tokenizer
from kitae.rewards.graders import TemplateGrader
from kitae.rewards.chat_template import TemplateConfig
from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine
from kitae.scoring.sample_and_grade import sample_dict
from tests.families.families import LLAMA3_TEMPLATE
from tests.families.say import Say
from tests.families.real_vocab import llama3_tokenizer, llama3_vocab_file

pytestmark = pytest.mark.slow  # building the 128k-token BPE takes tens of seconds

EOS = [128001, 128008, 128009]  # Llama 3.1 Instruct's generation_config.json: <|end_of_text|>, <|eom_id|>, <|eot_id|>


@pytest.fixture(scope="module")
def llama3_folder(tmp_path_factory):
    path = llama3_vocab_file()
    if path is None:
        pytest.skip("the llama-models package (Llama 3's vocabulary) is not installed: pip install llama-models")
    tok = llama3_tokenizer(path, LLAMA3_TEMPLATE)
    folder = tmp_path_factory.mktemp("llama3-real")
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=128000, eos_token_id=EOS, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.generation_config = GenerationConfig(bos_token_id=128000, eos_token_id=EOS)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_prompt_ids_are_meta_s(llama3_folder):
    tok = load_tokenizer(llama3_folder)
    ids = HFEngine(None, tok).encode_prompt([{"role": "user", "content": "This is a test sentence."}])
    # Meta's llama_models/llama3/tests/api/test_tokenizer.py (test_encode_message), after <|begin_of_text|>, and
    # the generation prompt the chat template adds
    assert ids == [128000, 128006, 882, 128007, 271, 2028, 374, 264, 1296, 11914, 13, 128009,
                   128006, 78191, 128007, 271]
    assert tok.decode(ids[1:4]) == "<|start_header_id|>user<|end_header_id|>"


def test_end_marker_and_stops_of_the_real_tokenizer(llama3_folder):
    tok = load_tokenizer(llama3_folder)
    end = end_marker_of(tok)
    assert (end.text, set(end.ids)) == ("<|eot_id|>", set(EOS))
    engine = HFEngine(load_causal_lm(llama3_folder), tok)
    word = tok.encode(" Paris", add_special_tokens=False)
    for end_id in EOS:
        say = Say(engine.model, [*word, end_id, *word])
        try:
            [[c]] = engine.generate([to_messages("Capital of France?")], 1, SamplingParams(temperature=0, max_new_tokens=6))
        finally:
            say.remove()
        assert (c.completion_ids, c.finish_reason) == ([*word, end_id], "stop")
        compliant = TemplateGrader(TemplateConfig(min_chars=1)).grade_sample({}, sample_dict(c, 6))
        assert compliant.sub_scores["compliant"] == (1.0 if end_id == 128009 else 0.0)


def test_checkpoints_keep_the_tokenizer_files_and_the_end_ids(llama3_folder, tmp_path):
    """A full checkpoint's tokenizer files are the base's (kitae batches with pad_token <|eot_id|>; saved, a later
    SFT collator that masks padding would mask every end of turn); an adapter folder carries the base's
    generation_config.json (without it Llama 3's three end ids shrink to config.json's one)."""
    import json

    import peft

    from kitae.trainer.checkpoint import save_model

    tok = load_tokenizer(llama3_folder)
    assert tok.pad_token == "<|eot_id|>"  # what kitae batches with
    source = json.loads((llama3_folder / "tokenizer_config.json").read_text())
    full = tmp_path / "full"
    save_model(full, load_causal_lm(llama3_folder), tok, base_folder=llama3_folder)
    saved = json.loads((full / "tokenizer_config.json").read_text())
    assert saved.get("pad_token") == source.get("pad_token")
    assert load_tokenizer(full).pad_token_id == tok.pad_token_id  # kitae's own loader still pads the same

    adapter = tmp_path / "adapter"
    model = peft.get_peft_model(load_causal_lm(llama3_folder), peft.LoraConfig(r=2, target_modules=["q_proj"]))
    save_model(adapter, model, tok, base_folder=llama3_folder)
    assert not (adapter / "config.json").exists()
    assert GenerationConfig.from_pretrained(adapter).eos_token_id == EOS
    assert json.loads((adapter / "tokenizer_config.json").read_text()).get("pad_token") == source.get("pad_token")
    assert set(end_marker_of(load_tokenizer(adapter)).ids) == set(EOS)

"""Each family's end of turn, found from its tokenizer, chat template and generation config; its prompts; the
in-process engine stopping at every end id; the graders cutting at the model's own marker."""

from __future__ import annotations

import jinja2
import pytest

from kitae.chat import IM_END, end_marker_of, format_prompt, to_messages
from kitae.models import BUNDLED_MODEL, load_causal_lm, load_tokenizer
from kitae.rewards.graders import DiversityGrader, RepetitionGrader, RewardModelGrader, TemplateGrader
from kitae.rewards.chat_template import TemplateConfig
from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine
from kitae.scoring.sample_and_grade import sample_dict
from tests.families.say import Say

# Each family's prompt for a system turn "Be brief." and a user turn "hi", as its real chat template writes it.
PROMPTS = {
    "qwen2.5": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "qwen3": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "llama3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "gemma2": None,  # its template refuses a system turn
    "gemma3": "<bos><start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\n",  # system joins the user turn
    "mistral": "<s>[INST] Be brief.\n\nhi[/INST]",
    "phi3": "<|system|>\nBe brief.<|end|>\n<|user|>\nhi<|end|>\n<|assistant|>\n",
}


def test_the_end_marker_is_the_family_s_turn_terminator_and_every_eos_id(family):
    fam, folder = family
    tok = load_tokenizer(folder)
    end = end_marker_of(tok)
    assert end.text == fam.end
    assert set(end.ids) == {tok.convert_tokens_to_ids(t) for t in fam.eos_ids}
    assert set(end.texts) == set(fam.eos_ids)
    assert end.stops[0] == fam.end
    assert end_marker_of(tok, override="<|my_end|>").text == "<|my_end|>"


def test_chatml_stays_the_default_for_chatml_models_and_models_without_a_template():
    assert end_marker_of(load_tokenizer(BUNDLED_MODEL)).text == IM_END
    assert end_marker_of(None).text == IM_END
    tok = load_tokenizer(BUNDLED_MODEL)
    tok.chat_template = None
    assert end_marker_of(tok).text == IM_END


def test_prompts_follow_the_family_chat_template_with_a_system_turn(family):
    fam, folder = family
    tok = load_tokenizer(folder)
    messages = to_messages("hi", "Be brief.")
    if PROMPTS[fam.name] is None:
        with pytest.raises(jinja2.TemplateError, match="System role not supported"):
            format_prompt(tok, messages)
        return
    assert format_prompt(tok, messages) == PROMPTS[fam.name]
    ids = HFEngine(None, tok).encode_prompt(messages)
    assert tok.decode(ids) == PROMPTS[fam.name]
    if fam.bos:  # the bos token as the template writes it (Phi-3's writes none), never a second one
        assert ids.count(tok.convert_tokens_to_ids(fam.bos)) == PROMPTS[fam.name].count(fam.bos)


def test_qwen3_thinking_switch_goes_through_chat_template_kwargs(family_dirs):
    tok = load_tokenizer(family_dirs["qwen3"])
    messages = to_messages("hi")
    thinking = HFEngine(None, tok).encode_prompt(messages)
    quiet = HFEngine(None, tok, chat_template_kwargs={"enable_thinking": False}).encode_prompt(messages)
    assert tok.decode(thinking).endswith("<|im_start|>assistant\n")
    assert tok.decode(quiet).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def _engine(folder):
    model = load_causal_lm(folder)
    return HFEngine(model, load_tokenizer(folder))


def test_sampling_stops_at_every_end_id_of_the_model(family):
    fam, folder = family
    engine = _engine(folder)
    word = engine.tokenizer.encode("hello", add_special_tokens=False)
    for end_id, end_text in zip(engine.end_marker.ids, engine.end_marker.texts):
        say = Say(engine.model, [*word, end_id, *word])
        try:
            [[greedy, sampled]] = engine.generate([to_messages("hi")], 2, SamplingParams(temperature=0, max_new_tokens=8))
        finally:
            say.remove()
        for c in (greedy, sampled):
            assert (c.completion_ids, c.finish_reason) == ([*word, end_id], "stop"), (fam.name, end_text)
            assert c.text == "hello" + end_text
            assert c.end_marker == fam.end
    say = Say(engine.model, [*word, engine.end_marker.ids[0]])
    try:  # an explicit stop list is the whole list: no end id stops it
        [[c]] = engine.generate([to_messages("hi")], 1, SamplingParams(temperature=0, max_new_tokens=5, stop=[]))
    finally:
        say.remove()
    assert (c.finish_reason, c.num_tokens) == ("length", 5)


def _rollout(engine, ends: list[int]) -> list[dict]:
    """Four samples: "hello" then each of `ends` in turn, graded as the trainer grades them."""
    word = engine.tokenizer.encode("hello", add_special_tokens=False)
    out = []
    for end in ends:
        say = Say(engine.model, [*word, *end])
        try:
            [[c]] = engine.generate([to_messages("hi")], 1, SamplingParams(temperature=0, max_new_tokens=len(word) + 3))
        finally:
            say.remove()
        out.append(sample_dict(c, len(word) + 3, step=0))
    return out


def test_graders_cut_at_the_model_s_own_end_marker(family):
    fam, folder = family
    engine = _engine(folder)
    turn_end = engine.tokenizer.convert_tokens_to_ids(fam.end)
    other = [i for i in engine.end_marker.ids if i != turn_end]
    ended, *rest = _rollout(engine, [[turn_end], *[[i] for i in other[:1]]])
    assert ended["output_text"] == "hello" + fam.end
    assert ended.get("end_marker", IM_END) == fam.end  # sent only when it is not ChatML's
    template = TemplateGrader(TemplateConfig(min_chars=1))
    assert template.grade_sample({}, ended).sub_scores["compliant"] == 1.0
    for s in rest:  # another eos (Llama 3's <|end_of_text|>, Gemma's <eos>) is not the end of a turn
        assert template.grade_sample({}, s).sub_scores["compliant"] == 0.0
    if fam.end != IM_END:  # a spec's end_marker overrides the model's
        chatml = TemplateGrader(TemplateConfig(min_chars=1, end_marker=IM_END))
        assert chatml.grade_sample({}, ended).sub_scores["compliant"] == 0.0
    bare = {**ended, "output_text": "hello"}
    assert DiversityGrader().grade_samples({}, [ended, bare])[1].sub_scores["duplicate"] == 1.0
    looping = {**ended, "output_text": "abcabcabcabc" + fam.end}
    assert RepetitionGrader().grade_sample({}, looping).sub_scores["rate"] == pytest.approx(7 / 3 - 1)  # 7 six-grams, 3 distinct: the marker cut off


class Lengths:
    """A reward model whose score is the length of the assistant's reply."""

    def score(self, conversations):
        return [float(len(c[-1]["content"])) for c in conversations]


def test_the_reward_model_gate_uses_the_model_s_end_marker(family):
    fam, folder = family
    engine = _engine(folder)
    turn_end = engine.tokenizer.convert_tokens_to_ids(fam.end)
    [ended] = _rollout(engine, [[turn_end]])
    unended = {**ended, "output_text": "hello", "finish_reason": "stop"}
    grader = RewardModelGrader(Lengths())
    item = {"messages": to_messages("hi")}
    grades = grader.grade_group(item, [ended, unended])
    assert grader.counts.gated == 1 and grades[1].sub_scores.get("gated") == 1.0
    assert grades[0].sub_scores["rm_score"] == len("hello")  # the content, cut before the model's marker


def test_a_control_token_of_the_family_s_format_inside_an_answer_is_a_stray_token(family):
    """Llama 3 writing <|start_header_id|> mid-answer, Gemma <start_of_turn>, Mistral [INST]: each special token
    of the model that does not end generation, written before the turn's end, breaks the template, for the
    template reward, the reward model's gate and the evaluation's compliance."""
    from kitae.chat import is_template_compliant, sample_controls

    fam, folder = family
    engine = _engine(folder)
    turn_end = engine.tokenizer.convert_tokens_to_ids(fam.end)
    controls = [t for t in fam.specials if t not in engine.end_marker.texts and t not in fam.plain]
    assert controls
    samples = _rollout(engine, [[engine.tokenizer.convert_tokens_to_ids(t), turn_end] for t in controls])
    template = TemplateGrader(TemplateConfig(min_chars=1))
    for token, s in zip(controls, samples):
        assert s["output_text"] == f"hello{token}{fam.end}"
        grade = template.grade_sample({}, s)
        assert (grade.sub_scores["compliant"], grade.reason) == (0.0, f"stray template token {token}"), fam.name
        assert not is_template_compliant(s["output_text"], s["finish_reason"], fam.end, sample_controls(s))
    grader = RewardModelGrader(Lengths())
    grader.grade_group({"messages": to_messages("hi")}, samples)
    assert grader.counts.gated == len(samples)


def test_reasoning_tags_are_no_stray_tokens(family_dirs):
    engine = _engine(family_dirs["qwen3"])
    tok = engine.tokenizer
    ids = [tok.convert_tokens_to_ids(t) for t in ("<think>", "</think>", "<|im_end|>")]
    [s] = _rollout(engine, [ids])
    assert s["output_text"] == "hello<think></think><|im_end|>"
    assert "<think>" not in engine.end_marker.controls and "<|im_start|>" in engine.end_marker.controls
    assert TemplateGrader(TemplateConfig(min_chars=1)).grade_sample({}, s).sub_scores["compliant"] == 1.0


def test_an_added_token_marked_special_but_not_named_is_a_control_token():
    """Meta's Llama 3 tokenizer marks its header and reserved tokens special in added_tokens without naming them
    among the additional special tokens."""
    from transformers import AddedToken

    from tests.families.families import BY_NAME

    tok = BY_NAME["llama3"].tokenizer()
    tok.add_tokens([AddedToken("<|reserved_special_token_3|>", special=True, normalized=False),
                    AddedToken("<tool>", special=False, normalized=False)])
    assert "<|reserved_special_token_3|>" not in tok.all_special_tokens
    controls = end_marker_of(tok).controls
    assert "<|reserved_special_token_3|>" in controls and "<tool>" not in controls

"""The final answer is read before the model's own end marker, whichever family wrote the completion."""

from __future__ import annotations

import pytest

from kitae.chat import EndMarker
from kitae.graders.answer_match import answers_match, extract_number, normalize_answer

LLAMA3 = EndMarker("<|eot_id|>", (9, 7), ("<|eot_id|>", "<|end_of_text|>"))


@pytest.mark.parametrize(
    "completion, reference, end, expected",
    [
        ("The capital is Paris.<|eot_id|>", "Paris", "<|eot_id|>", True),  # Llama 3: cut at its turn end
        ("The capital is Paris.<|eot_id|>", "Paris", LLAMA3, True),  # the model's EndMarker
        ("Paris.<|end_of_text|>", "Paris", LLAMA3, True),  # any text it stops at
        ("47<end_of_turn>\n<start_of_turn>user\n12", "47", "<end_of_turn>", True),  # Gemma: after the turn is not the answer
        ("47</s>[INST] 12", "47", ("</s>",), True),  # Mistral, as a list of markers
        ("47<|im_end|>12", "47", "<|eot_id|>", False),  # another family's marker is text
        ("12+35=47です。<|im_end|>", "47", "<|im_end|>", True),  # ChatML, the default
    ],
)
def test_the_answer_is_read_before_the_given_end_marker(completion, reference, end, expected):
    assert answers_match(completion, reference, end=end) is expected


def test_chatml_stays_the_default():
    assert answers_match("12+35=47です。<|im_end|>", "47")
    assert extract_number("47<|im_end|>12") == 47.0
    assert normalize_answer("Paris.<|im_end|>") == "paris"
    assert normalize_answer("Paris.<|eot_id|>", end="<|eot_id|>") == "paris"

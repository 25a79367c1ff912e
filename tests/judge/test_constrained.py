"""JSON-schema constrained decoding with a real tiny model: outputs validate, and the model makes the choices."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from kitae.judge.prompt import DEFAULT_CRITERIA, reply_schema
from kitae.rollout.base import SamplingParams
from kitae.serving.constrained import ConstrainedDecoder, supported
from tests.tiny import tiny_llama, tiny_tokenizer


@pytest.fixture(scope="module")
def lm():
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), seed=3)
    model.eval()
    return model, tok, ConstrainedDecoder(model, tok, max_string_tokens=12)


def prompt(tok, text="Grade: what is 12+35?") -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


SCHEMAS = [
    reply_schema(3, DEFAULT_CRITERIA, (1, 5)),  # the group judge's reply
    {"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"]},  # score_model
    {"type": "object", "properties": {"label": {"type": "string", "enum": ["correct", "wrong", "partly correct"]}}},
    {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 100}, "maxItems": 4},
    {"type": "array", "items": {"type": "number", "minimum": 0.5, "maximum": 2.5}, "minItems": 2, "maxItems": 3},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/pair"}, "b": {"type": ["boolean", "null"]},
                                      "c": {"type": "string", "minLength": 3, "maxLength": 5}, "d": {"const": 7},
                                      "e": {"anyOf": [{"type": "null"}, {"type": "string"}]}},
     "$defs": {"pair": {"type": "array", "prefixItems": [{"const": "k"}, {"type": "null"}], "items": False}}},
    {},  # anything: a string
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_output_always_validates(lm, schema, temperature):
    _, tok, dec = lm
    text, tokens = dec.generate(prompt(tok), schema, SamplingParams(temperature=temperature, seed=5), max_tokens=120)
    jsonschema.validate(json.loads(text), schema)
    assert tokens > 0


def test_same_seed_same_output(lm):
    _, tok, dec = lm
    sp = SamplingParams(temperature=1.0, seed=11)
    assert dec.generate(prompt(tok), SCHEMAS[0], sp)[0] == dec.generate(prompt(tok), SCHEMAS[0], sp)[0]


def next_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, -1]  # [V]


@pytest.mark.parametrize("options", [["correct", "wrong", "maybe"], [1, 2, 3, 4, 5]])
def test_the_model_chooses_the_option(lm, options):
    """Greedy: the decoder picks the option whose distinguishing token the model itself ranks highest."""
    model, tok, dec = lm
    schema = {"type": "object", "properties": {"x": {"enum": options}}}
    text, _ = dec.generate(prompt(tok), schema, SamplingParams(temperature=0))
    encoded = [tok.encode(json.dumps(o), add_special_tokens=False) for o in options]
    shared = 0  # tokens every option starts with ('"' for strings)
    while len({tuple(e[: shared + 1]) for e in encoded}) == 1:
        shared += 1
    context = prompt(tok) + tok.encode('{"x": ', add_special_tokens=False) + encoded[0][:shared]
    logits = next_logits(model, context)
    expected = max(range(len(options)), key=lambda i: logits[encoded[i][shared]].item())
    assert json.loads(text) == {"x": options[expected]}


def test_strings_stop_at_the_models_quote_and_respect_max_tokens(lm):
    _, tok, dec = lm
    schema = {"type": "object", "properties": {"s": {"type": "string"}, "t": {"type": "string"}}}
    text, tokens = dec.generate(prompt(tok), schema, SamplingParams(temperature=1.0, seed=1), max_tokens=1)
    assert json.loads(text) == {"s": "", "t": ""}  # the budget is spent by the structure: strings close at once


@pytest.mark.parametrize(
    "schema, ok",
    [
        ({"type": "string"}, True),
        (reply_schema(2, DEFAULT_CRITERIA, (0, 100)), True),  # a wide scale: minimum/maximum
        ({"type": "string", "pattern": "^a+$"}, False),
        ({"type": "string", "format": "date-time"}, False),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, False),
        ({"type": "number", "exclusiveMinimum": 0}, False),
        ({"$ref": "https://example.com/schema.json"}, False),
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}, False),
        ({"type": "tuple"}, False),
    ],
)
def test_supported_subset(schema, ok):
    assert supported(schema) is ok

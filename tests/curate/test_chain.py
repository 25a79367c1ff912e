"""Recipes and step settings are read by kitae.config, the one config reader: errors name the recipe file or the
step and the key, a misspelt key gets a did-you-mean, and bounds come from each field's setting(minimum=...)."""

from __future__ import annotations

import pytest

from kitae.curate import load_recipe, parse_step
from kitae.errors import ConfigError

RECIPE_ERRORS = [
    # recipe text, error
    ("threads: 0\nsteps: [format]", "recipe.yaml: threads: must be >= 1, got 0"),
    ("thread: 2\nsteps: [format]", "recipe.yaml: thread: unknown key; did you mean 'threads'?"),
    ("threads: true\nsteps: [format]", "recipe.yaml: threads: expected an integer, got True"),
    ("steps: format", "recipe.yaml: steps: expected a list, got str"),
    ("- format", "recipe.yaml: the config must be a mapping at the top level"),
]


@pytest.mark.parametrize("text, message", RECIPE_ERRORS)
def test_recipe_errors_name_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert str(err.value) == f"{tmp_path}/{message}"


def test_a_recipe_gives_the_keys_it_sets(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("data: in.jsonl\nsteps: [format, {dedupe: {eval: [test.jsonl]}}]\nthreads: 2\n")
    assert load_recipe(path) == {"data": "in.jsonl", "steps": ["format", {"dedupe": {"eval": ["test.jsonl"]}}],
                                 "threads": 2}


STEP_ERRORS = [
    # step, settings, error
    ("testcases", {"workers": 0}, "testcases.workers: must be >= 1, got 0"),
    ("testcases", {"compare": "token"}, "testcases.compare: got 'token'; expected one of tokens, lines, exact; "
                                        "did you mean 'tokens'?"),
    ("balance", {"size": -1}, "balance.size: must be >= 0, got -1"),
    ("dedupe", {"ngram_n": 0}, "dedupe.ngram_n: must be >= 1, got 0"),
    ("dedupe", {"treshold": 0.8}, "dedupe.treshold: unknown key; did you mean 'threshold'?"),
    ("dedupe", {"threshold": 1.5}, "dedupe.threshold: a cosine threshold is in [-1, 1], got 1.5"),
    ("difficulty", {"batch_prompts": 0}, "difficulty.batch_prompts: must be >= 1, got 0"),
    ("difficulty", {"n": 0}, "difficulty.n: need at least one sample per prompt, got 0"),
]


@pytest.mark.parametrize("step, settings, message", STEP_ERRORS)
def test_step_setting_errors_name_the_step_and_the_key(step, settings, message):
    with pytest.raises(ConfigError) as err:
        parse_step(step, settings, "")
    assert str(err.value) == message

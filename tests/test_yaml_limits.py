"""Hostile YAML: every YAML kitae reads (train configs, --set values, grader specs, curate recipes) refuses deep
nesting and alias bombs with a ConfigError naming the file and line, and no error message prints a huge value."""

from __future__ import annotations

import pytest

from kitae.config import MAX_YAML_DEPTH, MAX_YAML_NODES, safe_load, short_repr
from kitae.errors import ConfigError
from kitae.trainer.config import load_train_config

REWARDS = "rewards: [{grader: {type: answer}}]\n"


def _bomb(levels: int, width: int = 9) -> str:
    """A flow list of anchors, each level `width` aliases of the one before: width**levels leaves in all."""
    parts = ["&a0 [" + ", ".join(['"lol"'] * width) + "]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


def _write(tmp_path, text: str, name: str = "cfg.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "body",
    [
        "name: " + "[" * 50_000 + "]" * 50_000 + "\n",  # flow nesting 50,000 deep
        "name: " + "{a: " * 5_000 + "1" + "}" * 5_000 + "\n",  # flow mappings
        "".join(" " * i + f"k{i}:\n" for i in range(1_000)),  # block nesting by indentation (500 kB)
    ],
    ids=["flow-lists", "flow-maps", "block"],
)
def test_deep_nesting_is_a_config_error_naming_file_and_line(tmp_path, body):
    path = _write(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        load_train_config(path)
    msg = str(err.value)
    assert str(path) in msg and f"nested deeper than {MAX_YAML_DEPTH} levels" in msg and "line " in msg
    assert len(msg) < 600


def test_alias_bomb_is_refused_before_it_expands(tmp_path):
    path = _write(tmp_path, REWARDS + "optim:\n  lr: " + _bomb(9) + "\n")  # 9**9 = 387M leaves if expanded
    with pytest.raises(ConfigError) as err:
        load_train_config(path)
    msg = str(err.value)
    assert str(path) in msg and f"more than {MAX_YAML_NODES:,} values" in msg and "line 3" in msg
    assert len(msg) < 600


def test_a_large_value_within_the_limits_is_not_printed_in_the_error(tmp_path):
    path = _write(tmp_path, REWARDS + "optim:\n  lr: " + _bomb(4) + "\n")  # 9**4 leaves: allowed, but not a number
    with pytest.raises(ConfigError) as err:
        load_train_config(path)
    assert str(err.value).startswith("optim.lr: expected a number, got [")
    assert len(str(err.value)) < 120


def test_recursive_alias_is_refused(tmp_path):
    path = _write(tmp_path, REWARDS + "optim:\n  betas: &b [0.9, *b]\n")
    with pytest.raises(ConfigError, match="refers to a node that contains it"):
        load_train_config(path)


def test_ordinary_anchors_and_merge_keys_still_work(tmp_path):
    path = _write(tmp_path, (
        "rewards:\n"
        "  - {name: a, grader: &g {type: text_similarity, evaluation_metric: fuzzy_match}}\n"
        "  - {name: b, grader: {<<: *g, evaluation_metric: rouge_l}}\n"
        "  - {name: c, grader: *g}\n"))
    cfg = load_train_config(path)
    assert [r.grader["evaluation_metric"] for r in cfg.rewards] == ["fuzzy_match", "rouge_l", "fuzzy_match"]


@pytest.mark.parametrize("text", ["lr: 1" + "0" * 5000, "\udcff: 1"], ids=["int-too-long", "surrogate"])
def test_unconvertible_scalars_are_yaml_errors(text):
    import yaml

    with pytest.raises(yaml.YAMLError):
        safe_load(text, "x.yaml")


def test_non_utf8_config_names_file_and_line(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_bytes(b"name: ok\nrewards: []\n# caf\xe9\n")
    with pytest.raises(ConfigError) as err:
        load_train_config(path)
    assert str(path) in str(err.value) and "line 3" in str(err.value) and "UTF-8" in str(err.value)


def test_set_override_bomb_is_refused():
    with pytest.raises(ConfigError, match="more than"):
        load_train_config(data={"rewards": [{"grader": {"type": "answer"}}]}, overrides=["optim.lr=" + _bomb(9)])


def test_grader_spec_file_and_inline_spec_bombs_are_refused(tmp_path):
    from kitae.graders import build_grader

    spec = _write(tmp_path, "type: string_check\nreference: " + _bomb(9) + "\n", "spec.yaml")
    with pytest.raises(ConfigError) as err:
        build_grader(str(spec))
    assert "spec.yaml" in str(err.value) and "more than" in str(err.value)
    with pytest.raises(ConfigError, match="nested deeper"):
        build_grader("{type: string_check, reference: " + "[" * 105 + "]" * 105 + "}")  # under 255 characters


def test_curate_recipe_bomb_is_refused(tmp_path):
    from kitae.curate.chain import load_recipe

    path = _write(tmp_path, "steps: " + _bomb(9) + "\n", "recipe.yaml")
    with pytest.raises(ConfigError, match="more than"):
        load_recipe(path)


def test_short_repr_of_a_shared_reference_bomb_is_short():
    value: list = ["lol"] * 10
    for _ in range(9):
        value = [value] * 10  # 10**10 leaves if printed in full
    text = short_repr(value)
    assert len(text) <= 60 and text.startswith("[[[")
    assert "..." in short_repr("x" * 10_000) and len(short_repr("x" * 10_000)) <= 60


def test_a_large_value_in_a_grader_choice_field_is_not_printed(tmp_path):
    from kitae.graders import build_grader

    spec = _write(tmp_path, "type: string_check\ninput: a\nreference: b\noperation: " + _bomb(5) + "\n", "spec.yaml")
    with pytest.raises(ConfigError) as err:
        build_grader(str(spec))
    message = str(err.value)
    assert message.startswith("grader.operation: got [") and "expected one of eq, ne" in message and len(message) < 200


def test_a_huge_config_file_is_refused_by_its_size_before_it_is_read(tmp_path):
    """Refused by size, not parsed: the text is invalid YAML at its first line, which parsing would report."""
    from kitae.config import MAX_YAML_BYTES

    path = tmp_path / "cfg.yaml"
    with path.open("w", encoding="utf-8") as f:
        f.write("\t: [\n")  # a tab where YAML allows none: a parse error on line 1
        f.write(("# " + "x" * 98 + "\n") * (MAX_YAML_BYTES // 100 + 1))
    with pytest.raises(ConfigError) as err:
        load_train_config(path)
    msg = str(err.value)
    assert str(path) in msg and "too large" in msg and f"{MAX_YAML_BYTES:,}" in msg, msg


def test_huge_yaml_text_is_refused_before_parsing():
    import yaml

    from kitae.config import MAX_YAML_BYTES

    with pytest.raises(yaml.YAMLError, match="too large"):
        safe_load("\t: [\n" + "#" * MAX_YAML_BYTES, "x.yaml")


def test_a_huge_grader_spec_file_is_refused_by_its_size(tmp_path):
    from kitae.config import MAX_YAML_BYTES
    from kitae.graders import build_grader

    spec = _write(tmp_path, "type: string_check\nreference: '" + "x" * MAX_YAML_BYTES + "'\n", "spec.yaml")
    with pytest.raises(ConfigError) as err:
        build_grader(str(spec))
    assert "spec.yaml" in str(err.value) and "too large" in str(err.value)


@pytest.mark.parametrize("text, key, line", [
    ("name: a\nseed: 1\nname: b\n", "name", 3),  # top level
    ("optim:\n  lr: 1e-4\n  steps: 2\n  lr: 1e-5\n", "lr", 4),  # nested
    ("rewards: [{grader: {type: answer, type: template}}]\n", "type", 1),  # flow mapping
])
def test_a_key_written_twice_is_refused_with_its_line(tmp_path, text, key, line):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_train_config(path)
    msg = str(err.value)
    assert str(path) in msg and f"the key '{key}' is written twice" in msg and f"line {line}," in msg, msg


def test_a_merge_key_may_be_overridden():
    """`<<: *base` then a key of base: YAML's merge, meant to be overridden, not a duplicate."""
    assert safe_load("base: &b {x: 1, y: 2}\nuse: {<<: *b, x: 3}\n") == {"base": {"x": 1, "y": 2},
                                                                          "use": {"x": 3, "y": 2}}


def test_a_duplicate_key_in_a_grader_spec_is_refused():
    from kitae.graders import build_grader

    with pytest.raises(ConfigError, match="the key 'type' is written twice"):
        build_grader("{type: answer, type: template}")


def test_a_value_yaml_reads_as_a_comment_is_refused(tmp_path):
    """GSM8K's answer pattern written unquoted: YAML reads `####...` as a comment and answer_pattern as null, and
    the run would train on the whole worked answer as the reference, silently."""
    path = _write(tmp_path, REWARDS + "data:\n  answer_pattern: ####\\s*(.+)$\n")
    with pytest.raises(ConfigError) as err:
        load_train_config(path)
    msg = str(err.value)
    assert str(path) in msg and "line 3," in msg and "reads as a comment" in msg, msg
    assert "answer_pattern: '####\\s*(.+)$'" in msg


@pytest.mark.parametrize("text", ["eval:   # none\n", "eval: #TODO\n", "eval:\n", "eval: null # c\n"])
def test_a_comment_after_a_key_is_still_a_comment(text):
    assert safe_load(text) == {"eval": None}

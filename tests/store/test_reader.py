"""Reader queries: ordering, filters and pagination of groups, prompt history, by hand-worked data."""

from __future__ import annotations

import pytest

from kitae.errors import ConfigError

from tests.store.hand_made import make_group

# step -> groups (group_index = position); group i has prompt "question i" at every step
STEPS = {
    1: [
        make_group(0, [1.0, 1.0]),  # mean 1, std 0
        make_group(1, [0.0, 1.0]),  # mean .5, std .5
        make_group(2, [0.0, 0.0], truncated=1),  # mean 0, std 0, truncated
        make_group(3, [None, None]),  # all abstained: no mean, no std
    ],
    2: [
        make_group(0, [1.0, 0.0, 0.0, 0.0]),  # mean .25, std .433
        make_group(1, [0.5, 0.5]),  # mean .5, std 0
        make_group(2, [0.0, 0.0], truncated=2),  # mean 0, std 0, truncated
    ],
}


@pytest.fixture
def filled(store):
    for step, groups in STEPS.items():
        store.log_groups(step, groups)
    return store


def keys(rows):
    return [(r.step, r.group_index) for r in rows]


QUERY_CASES = [
    # kwargs -> (step, group_index) in the expected order
    (dict(order="worst"), [(2, 2), (1, 2), (2, 0), (2, 1), (1, 1), (1, 0), (1, 3)]),  # ties: newest step first
    (dict(order="step"), [(2, 0), (2, 1), (2, 2), (1, 0), (1, 1), (1, 2), (1, 3)]),  # newest step first
    (dict(order="variance"), [(1, 1), (2, 0), (2, 1), (2, 2), (1, 0), (1, 2), (1, 3)]),  # widest spread first
    (dict(order="worst", filter="zero_variance"), [(2, 2), (1, 2), (2, 1), (1, 0)]),
    (dict(order="step", filter="truncated"), [(2, 2), (1, 2)]),
    (dict(step=1, order="worst"), [(1, 2), (1, 1), (1, 0), (1, 3)]),
    (dict(step=2, filter="zero_variance", order="step"), [(2, 1), (2, 2)]),
    (dict(prompt="question 0", order="worst"), [(2, 0), (1, 0)]),
    (dict(prompt="question 3"), [(1, 3)]),
    (dict(prompt="question 9"), []),
    (dict(order="worst", limit=3, offset=2), [(2, 0), (2, 1), (1, 1)]),  # rows 3-5
    (dict(order="worst", limit=3, offset=6), [(1, 3)]),  # last, partial page
    (dict(order="worst", limit=3, offset=9), []),  # past the end
    (dict(order="step", limit=None), [(2, 0), (2, 1), (2, 2), (1, 0), (1, 1), (1, 2), (1, 3)]),
]


@pytest.mark.parametrize("kwargs, expected", QUERY_CASES)
def test_groups_order_filter_page(filled, kwargs, expected):
    assert keys(filled.groups(**kwargs)) == expected


@pytest.mark.parametrize(
    "kwargs, expected",
    [(dict(), 7), (dict(step=1), 4), (dict(filter="zero_variance"), 4), (dict(step=2, filter="truncated"), 1),
     (dict(prompt="question 2"), 2)],
)
def test_count_groups_matches_groups(filled, kwargs, expected):
    assert filled.count_groups(**kwargs) == expected == len(filled.groups(limit=None, **kwargs))


def test_group_statistics_are_stored(filled):
    rows = {(r.step, r.group_index): r for r in filled.groups(limit=None)}
    assert (rows[(2, 0)].reward_mean, rows[(2, 0)].reward_std) == (0.25, pytest.approx(0.4330127))
    assert (rows[(1, 3)].reward_mean, rows[(1, 3)].reward_std, rows[(1, 3)].n_scored) == (None, None, 0)
    assert rows[(2, 2)].n_truncated == 2


def test_samples_are_loaded_only_when_asked(filled):
    assert all(r.samples == [] for r in filled.groups())
    assert [len(r.samples) for r in filled.groups(step=2, order="step", with_samples=True)] == [4, 2, 2]


def test_prompt_history_is_oldest_first_with_samples(filled):
    history = filled.prompt_history("question 1")
    assert [(r.step, r.reward_mean) for r in history] == [(1, 0.5), (2, 0.5)]
    assert [s.reward for s in history[0].samples] == [0.0, 1.0]
    assert [r.step for r in filled.prompt_history("question 1", limit=1, offset=1)] == [2]
    assert filled.prompt_history("question 9") == []


def test_group_steps(filled):
    assert filled.group_steps() == [1, 2]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(order="wrost"), "order: unknown group order 'wrost'; did you mean 'worst'?"),
        (dict(filter="truncate"), "filter: unknown group filter 'truncate'; did you mean 'truncated'?"),
    ],
)
def test_unknown_order_or_filter_is_a_config_error(filled, kwargs, message):
    with pytest.raises(ConfigError) as info:
        filled.groups(**kwargs)
    assert str(info.value).startswith(message)


def test_snapshot_holds_one_view_while_the_writer_commits(store):
    store.log_metrics(1, {"reward": 0.1})
    with type(store).open(store.run_dir, read_only=True) as reader:
        with reader.snapshot():
            assert reader.last_step() == 1
            store.log_metrics(2, {"reward": 0.2})  # committed by the writer's own connection
            assert reader.last_step() == 1 and reader.metrics(["reward"]) == {"reward": [(1, 0.1)]}
        assert reader.last_step() == 2

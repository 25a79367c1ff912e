"""Reward shaping and reward models: the GRPO-zero recipe's five rewards, Kimi k1.5's length reward, DAPO's soft overlong.

Each component is a pure function in its own module (hand-checkable, documented with its spec fields) and a
grader registered by spec ``type`` in :data:`kitae.graders.GRADERS` (kitae/rewards/graders.py), so it is used
like any other grader, alone or inside a ``weighted`` / ``multi`` spec::

    from kitae.graders import build_grader
    template = build_grader({"type": "template", "min_chars": 1, "full_chars": 0})
    template.grade_group(item, [{"output_text": "47<|im_end|>"}])   # [Grade(score=1.0, ...)]

    type           module            what
    template       chat_template.py  +1 × length factor when the chat template is followed, else -5 (GRPO-zero)
    repetition     repetition.py     -0.5 × character 6-gram repetition rate, floor -2 (GRPO-zero)
    overlong       overlong.py       -0.8 × progress² past 85% of max_completion_length, -1.5 when cut (GRPO-zero)
    diversity      diversity.py      -0.3 per duplicate, -0.2 × Jaccard for near-duplicates in a group (GRPO-zero)
    reward_model   quality.py        reward-model score, gated on the template, clipped ±10 (GRPO-zero)
    length         length.py         Kimi k1.5 length reward with weight and warm-up
    soft_overlong  overlong.py       DAPO soft overlong punishment

Reward models: reward_model.py (a local sequence classifier), remote.py (the HTTP client: kitae, SGLang and
vLLM protocols, retries, counters); ``kitae serve rm`` serves one (kitae/serving/reward_server.py). The bundled
tiny reward model (kitae/assets/models/kitae-tiny-rm) is built by scripts/build_reward_model.py.

Samples may carry ``finish_reason``, ``completion_tokens``, ``max_completion_length`` and ``step``; the
components read them when present.
"""

from kitae.rewards import graders as _graders  # noqa: F401  (registers the grader types above)

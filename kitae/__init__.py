"""kitae (鍛え, "forging"): reinforcement fine-tuning of language models with GRPO.

Layout (one folder per part of the system, listed from the bottom layer up; a part imports only parts
listed above it, never one below: docs/architecture.md, checked by tests/test_architecture.py):
    kitae/errors.py, jsonsafe.py, aio.py, registry.py, config.py, hub.py, chat.py, models.py, threads.py
                      the ground: errors for people, the one registry, the typed config reader, Hub ids, chat
                      formatting, model loading, the thread rule
    kitae/data        dataset loading and validation, images, the bundled task
    kitae/sandbox     where untrusted code runs (python and code graders, test generators): bubblewrap, rlimits
    kitae/http        HTTP plumbing shared by servers and clients: limits, request checks, retrying client
    kitae/algorithms  advantage estimators, policy losses, KL estimators and controllers, the mismatch correction
    kitae/rollout     rollout engines: generate G completions per prompt with per-token log-probs
    kitae/graders     graders: score a group of samples for one item (the hosted RFT grader guide, OpenAI grader schema)
    kitae/store       the run store (SQLite): the only contract between training and the web page
    kitae/rewards     reward shaping graders (the GRPO-zero recipe's five rewards, Kimi k1.5's length reward), reward models
    kitae/judge       LLM judges: the group judge, score_model, label_model, their client and checks
    kitae/scoring     sampling-and-grading shared by training, evaluation, curation and long2short
    kitae/agents      multi-turn, tool-using rollouts: the environment config, episodes, the agent engine, tools
    kitae/serving     `kitae serve model`: an OpenAI-compatible model server with continuous batching
    kitae/web         the run page
    kitae/curate      prompt-set curation steps (difficulty, hackable prompts, formats, dedupe, balance, test cases)
    kitae/long2short  long2short (Kimi k1.5): shortest rejection, DPO pairs, SFT, DPO, model merging
    kitae/trainer     the typed training config, pre-flight checks and the GRPO training loop
    kitae/cli         the `kitae` command
    kitae/assets      the bundled tiny models and task (data, not code)
"""

__version__ = "0.1.0"

"""kitae (鍛え, "forging"): reinforcement fine-tuning of language models with GRPO.

Layout (one folder per part of the system):
    kitae/data        dataset loading and validation, the bundled task
    kitae/rollout     rollout engines: generate G completions per prompt with per-token log-probs
    kitae/graders     graders: score a group of samples for one item (the hosted RFT grader guide, OpenAI grader schema)
    kitae/sandbox     where untrusted code runs (python and code graders, test generators): bubblewrap, rlimits
    kitae/judge       LLM judges: the group judge, score_model, label_model, their client and checks
    kitae/rewards     reward shaping functions (the GRPO-zero recipe's five rewards, Kimi's length reward), reward models
    kitae/algorithms  advantage estimators, policy losses, KL estimators and controllers
    kitae/trainer     typed config and the GRPO training loop
    kitae/store       the run store (SQLite): the only contract between training and the web page
    kitae/web         the run page
    kitae/serving     `kitae serve`: OpenAI-compatible model server, shared HTTP pieces and retrying client
    kitae/curate      prompt-set curation steps (difficulty, hackable prompts, formats, dedupe, balance)
    kitae/l2s         long2short (Kimi k1.5): shortest rejection, DPO pairs, SFT, DPO, model merging
    kitae/cli         the `kitae` command
    kitae/assets      the bundled tiny models and task
"""

__version__ = "0.1.0"

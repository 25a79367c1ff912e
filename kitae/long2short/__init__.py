"""long2short (Kimi k1.5 §2.4): make a long-answer model cheaper at test time while keeping its skill.

- :mod:`kitae.long2short.merge`: model merging, a weighted average of two (or more) models' weights (LoRA
  adapters are merged into their base first).
- :mod:`kitae.long2short.selection`: shortest-rejection sampling (sample n = 8, keep the shortest correct response,
  an SFT set) and DPO pairs (shortest correct = chosen; wrong longer ones and correct ones >= 1.5x longer =
  rejected).
- :mod:`kitae.long2short.train`: SFT and DPO on those files through TRL's SFTTrainer and DPOTrainer.
- :mod:`kitae.long2short.compare`: several models on one prompt set: pass@1 over k samples, mean and p90 tokens,
  template compliance, and the token-efficiency view (score against mean tokens) the paper plots.

long2short RL is the ordinary trainer with the length reward on and a much smaller max completion length
(examples/long2short_rl.yaml). The CLI is ``kitae eval`` (kitae/cli/evaluate.py), ``kitae merge`` and
``kitae long2short ...`` (short: ``kitae l2s``; kitae/cli/long2short.py).
"""

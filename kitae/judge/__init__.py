"""LLM judges (the hosted RFT grader guide): the group judge, OpenAI's score_model and label_model, their client and checks.

    type: judge                         # kitae/judge/group.py: all N samples in one call, 1-5 per criterion
    type: score_model                   # kitae/judge/model_graders.py: OpenAI's, a number per sample
    type: label_model                   # ... a label per sample, 1 when it passes

Modules:
    client.py         OpenAI-compatible chat client (httpx): retries, concurrency limit, cache, structured output
    cache.py          response cache: memory + optional SQLite file
    prompt.py         the group judge's prompt (fenced samples, anchored scale) and reply schema
    parse.py          tolerant reading and strict checking of a judge's reply
    group.py          the group judge grader
    model_graders.py  score_model and label_model
    checks.py         order sensitivity and injection probes (``kitae grader validate --judge-checks``)
    testing.py        a scripted OpenAI-compatible server for tests and benchmarks

A local model can play the judge with ``kitae serve model`` (kitae/serving/). User guide: docs/judge.md.
The grader types are registered lazily in kitae/graders/spec.py, so importing this package is never needed
to build them by name.
"""

from kitae.judge.client import ChatClient, ChatError, ChatReply, Usage
from kitae.judge.prompt import DEFAULT_CRITERIA, Criterion

__all__ = ["DEFAULT_CRITERIA", "ChatClient", "ChatError", "ChatReply", "Criterion", "Usage"]

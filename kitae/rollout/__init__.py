"""Rollout engines: G completions per prompt, with the sampling policy's per-token log-probs.

    base.py      the interface (``generate``) and one class per optional ability (weight sync, token ids,
                 state to checkpoint, ...), :class:`SamplingParams`, :class:`Completion`, the ``ENGINES`` registry
                 and the engines' settings family (``EngineSettings``)
    codec.py     one TokenCodec per engine: chat template, end marker, stop strings, decoding (hf and server)
    hf.py        ``hf``: in this process, batched sampling with a KV cache and left padding
    vision.py    the same for vision-language models (image prompts)
    server.py    ``server``: groups sampled by inference servers (vLLM, SGLang, ``kitae serve model``), failover;
                 its settings (``ServerSettings``)
    sync.py      weight sync to those servers (``sampling.sync``: disk, vllm, none)
    replicas.py  start ``kitae serve model`` replicas as local processes
    partial.py   Kimi k1.5 partial rollouts: a per-iteration token budget and a replay buffer

Nothing is imported here.
"""

"""Serving local models over HTTP: ``kitae serve model`` (an OpenAI-compatible chat and completions server) and
``kitae serve rm`` (a reward model).

    server.py       the endpoints (/health, /v1/models, /v1/chat/completions, /v1/completions,
                    /update_weights_from_disk) on the standard library's http.server:
                    ``load_service(path)`` -> ChatService, ``make_server(service, host, port)``
    batching.py     continuous batching: one scheduler thread decodes every request's samples together
    completions.py  vLLM's completions API (token-id prompts, log-probs, token ids): checks and reply
    streaming.py    ``stream: true``: the reply as server-sent events while the batch decodes it
    weights.py      loading a model folder's safetensors into the served model in place
    constrained.py  JSON-schema constrained decoding, so ``response_format`` is honoured by any local model
    reward_server.py  ``kitae serve rm``: a local reward model (kitae.rewards.reward_model) in every wire format
                    the reward-model client (kitae/rewards/remote.py) speaks

The HTTP pieces both serve commands share (server class, bind rule, access token, Host and Origin checks,
request checks, server-sent events) are in kitae/http. Nothing is imported here.
"""

"""Serving local models over HTTP: ``kitae serve model`` (an OpenAI-compatible chat server).

    server.py       the endpoints (/v1/models, /v1/chat/completions) on the standard library's http.server
    constrained.py  JSON-schema constrained decoding, so ``response_format`` is honoured by any local model

``kitae serve rm`` (reward models) lives with the reward code in kitae/rewards/server.py.
"""

from kitae.serving.server import ChatService, load_service, make_server

__all__ = ["ChatService", "load_service", "make_server"]

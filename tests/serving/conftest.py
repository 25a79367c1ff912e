"""Both loopback JSON servers, in process, with small limits so every attack is cheap to send (the tiny models
they serve: tests/plugins/tiny_models.py)."""

from __future__ import annotations

import pytest

from tests.serving.loopback import LIMITS, TOKEN, serve_in_thread


@pytest.fixture(scope="module")
def servers(random_rm, random_lm):
    """{"rm": port, "model": port}: `kitae serve rm` and `kitae serve model` with a 64 KB body limit and a
    one-second read timeout."""
    from kitae.rewards.reward_model import LocalRewardModel
    from kitae.serving.reward_server import make_server as make_rm_server
    from kitae.serving.server import load_service, make_server as make_model_server

    rm = serve_in_thread(make_rm_server(LocalRewardModel(random_rm), port=0, limits=LIMITS))
    lm = serve_in_thread(make_model_server(load_service(random_lm, name="tiny", default_max_tokens=4), port=0,
                                            limits=LIMITS))
    yield {"rm": rm.server_address[1], "model": lm.server_address[1]}
    for server in (rm, lm):
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def guarded(random_rm, random_lm):
    """The same two servers with an access token."""
    from kitae.rewards.reward_model import LocalRewardModel
    from kitae.serving.reward_server import make_server as make_rm_server
    from kitae.serving.server import load_service, make_server as make_model_server

    rm = serve_in_thread(make_rm_server(LocalRewardModel(random_rm), port=0, token=TOKEN))
    lm = serve_in_thread(make_model_server(load_service(random_lm, name="tiny", default_max_tokens=4), port=0, token=TOKEN))
    yield {"rm": rm.server_address[1], "model": lm.server_address[1]}
    for server in (rm, lm):
        server.shutdown()
        server.server_close()

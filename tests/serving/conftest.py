"""Both loopback JSON servers, in process, with small limits so every attack is cheap to send."""

from __future__ import annotations

import threading

import pytest

from kitae.http.server import HttpLimits

LIMITS = HttpLimits(max_body_bytes=64 * 1024, read_timeout_s=1.0)
TOKEN = "t" * 24


def _serve(server):
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server


@pytest.fixture(scope="session")
def random_rm(tmp_path_factory) -> str:
    from tests.rewards.conftest import build_random_rm

    return build_random_rm(tmp_path_factory.mktemp("random-rm"))


@pytest.fixture(scope="session")
def tiny_rm(tmp_path_factory) -> str:
    from tests.rewards.conftest import bundled_or_random_rm

    return bundled_or_random_rm(tmp_path_factory)


@pytest.fixture(scope="session")
def random_lm(tmp_path_factory) -> str:
    from tests.judge.conftest import build_tiny_lm

    return build_tiny_lm(tmp_path_factory.mktemp("random-lm"))


@pytest.fixture(scope="module")
def servers(random_rm, random_lm):
    """{"rm": port, "model": port}: `kitae serve rm` and `kitae serve model` with a 64 KB body limit and a
    one-second read timeout."""
    from kitae.rewards.reward_model import LocalRewardModel
    from kitae.serving.reward_server import make_server as make_rm_server
    from kitae.serving.server import load_service, make_server as make_model_server

    rm = _serve(make_rm_server(LocalRewardModel(random_rm), port=0, limits=LIMITS))
    lm = _serve(make_model_server(load_service(random_lm, name="tiny", default_max_tokens=4), port=0,
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

    rm = _serve(make_rm_server(LocalRewardModel(random_rm), port=0, token=TOKEN))
    lm = _serve(make_model_server(load_service(random_lm, name="tiny", default_max_tokens=4), port=0, token=TOKEN))
    yield {"rm": rm.server_address[1], "model": lm.server_address[1]}
    for server in (rm, lm):
        server.shutdown()
        server.server_close()

"""kitae.trainer.stopping: Ctrl-C and SIGTERM ask a run to stop after its step, a second Ctrl-C stops at once, and
the handlers that were there come back."""

from __future__ import annotations

import os
import signal

import pytest
from accelerate import Accelerator

from kitae.trainer.stopping import StopRequest


def test_a_signal_asks_to_stop_and_a_second_stops_at_once():
    before = signal.getsignal(signal.SIGTERM)
    stop = StopRequest(Accelerator(cpu=True))
    stop.catch_signals()
    try:
        assert not stop.agreed()
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to the main thread before kill returns
        assert stop.requested and stop.signal == signal.SIGTERM
        assert stop.agreed()  # one process: it agrees with itself
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        stop.release_signals()
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_alarm_asks_to_stop_without_a_signal():
    stop = StopRequest(Accelerator(cpu=True))
    stop.requested = True  # what an alarm of alarms.stop_on sets
    assert stop.agreed() and stop.signal is None

"""Stopping a run before its last step, cleanly: Ctrl-C or SIGTERM asks it to stop after the step it is in, at a
checkpoint (a second Ctrl-C stops at once), as an alarm of ``alarms.stop_on`` does (kitae.trainer.alarms). In a
multi-process run every process stops after the same step, whichever of them was asked."""

from __future__ import annotations

import signal

from kitae.trainer.processes import agree_to_stop


class StopRequest:
    """Whether the run was asked to stop (``requested``) and by which signal (``signal``: SIGINT, SIGTERM; None
    when an alarm asked, or nothing did)."""

    def __init__(self, acc):
        self.acc = acc
        self.requested = False
        self.signal: int | None = None
        self._old_handlers: dict = {}

    def catch_signals(self) -> None:
        """Ctrl-C and SIGTERM ask to stop, from now until :meth:`release_signals` (main thread only)."""
        def request_stop(signum, frame):
            if self.requested:  # a second Ctrl-C stops at once
                raise KeyboardInterrupt
            self.requested, self.signal = True, signum

        try:
            self._old_handlers = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread
            self._old_handlers = {}

    def release_signals(self) -> None:
        """The signal handlers as they were before :meth:`catch_signals`."""
        for s, h in self._old_handlers.items():
            signal.signal(s, h)
        self._old_handlers = {}

    def agreed(self) -> bool:
        """Whether to stop after this step: asked in any process. A collective call in multi-process runs: a
        signal to one rank alone (``kill PID``) stops them all at the same step, where each deciding alone would
        leave the others waiting in a collective call."""
        stop, signum = agree_to_stop(self.acc, self.signal, self.requested)
        if stop:  # a signal that came after the agreement counts at the next step
            self.requested, self.signal = True, self.signal or signum
        return stop

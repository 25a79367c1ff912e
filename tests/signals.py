"""Child processes that get a Ctrl-C as they would in a terminal.

A shell starts a background command (``pytest ... &``) with SIGINT ignored, and an ignored signal stays ignored
across fork and exec: a `kitae` child would then never see the test's SIGINT (it runs to the end, or serves
forever). Tests that send SIGINT start their child with ``preexec_fn=sigint_as_in_a_terminal``.
"""

from __future__ import annotations

import signal


def sigint_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

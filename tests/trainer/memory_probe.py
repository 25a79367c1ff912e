"""Run by tests/trainer/test_memory_plan.py in a fresh process: one GRPO step of kitae's Trainer, and its peak RSS.

    python -m tests.trainer.memory_probe CONFIG OUT

Everything the run imports is imported first; then the process's resident set is the baseline, the kernel's
peak-RSS counter is reset (``/proc/self/clear_refs`` 5) and the Trainer loads the model and trains one step.
OUT (JSON) gets the baseline, the peak after the step (VmHWM) and the difference, in bytes.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path


def status(key: str) -> int:
    """A /proc/self/status line in bytes (VmRSS: now, VmHWM: the peak since the last reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def main(config: str, out: str) -> None:
    import torch  # noqa: F401  (every import before the baseline)
    import transformers  # noqa: F401

    from kitae.trainer.config import load_train_config
    from kitae.trainer.loop import Trainer

    cfg = load_train_config(config)
    gc.collect()
    baseline = status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
    Trainer(cfg).train()
    peak = status("VmHWM")
    Path(out).write_text(json.dumps({"baseline": baseline, "peak": peak, "measured": peak - baseline}))


if __name__ == "__main__":
    main(*sys.argv[1:3])

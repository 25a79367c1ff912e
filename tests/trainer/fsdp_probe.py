"""Run by tests/trainer/test_fsdp.py under ``accelerate launch`` (FSDP2 or data parallel, two processes):

    python -m tests.trainer.fsdp_probe JOBS

JOBS is a JSON file: a list of ``[CONFIG, OUT, HOW]``, run one after another in these processes (one launch
for many runs: a launch costs two processes' torch imports). Each trains the run of CONFIG with kitae's
Trainer, stopping cleanly (a checkpoint saved, as on Ctrl-C) after step HOW when HOW is a number, resuming it
when HOW is ``resume``, else to its end. The main process writes to OUT (JSON) how the run was distributed:
accelerate's distributed_type, the type of the prepared policy's parameters (DTensor when sharded) and the
share of the weights this process holds.
"""

from __future__ import annotations

import json
import sys

from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer


def run(config: str, out: str, how: str = "") -> None:
    trainer = Trainer(load_train_config(config), resume=how == "resume")
    params = list(trainer.model.parameters())
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in params)
    layout = {"distributed_type": trainer.acc.distributed_type.name, "param_type": type(params[0]).__name__,
              "share": local / sum(p.numel() for p in params), "processes": trainer.acc.num_processes}
    if how.isdigit():
        def stop_after(step: int, metrics: dict) -> None:
            if step == int(how):
                trainer.stop.requested = True  # what Ctrl-C sets: the step's checkpoint, then a clean stop

        trainer.on_step = stop_after
    trainer.train()
    if trainer.acc.is_main_process:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(layout, f)
    trainer.acc.wait_for_everyone()


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        for job in json.load(f):
            run(*job)

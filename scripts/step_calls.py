"""How much of kitae one training step runs through: the distinct named functions of kitae's own files that one
``Trainer.train_step`` of examples/zero.yaml calls, and the files they are in.

    python scripts/step_calls.py            # "<N> named functions in <M> files"
    python scripts/step_calls.py --list     # and the functions, file by file

The run is examples/zero.yaml shrunk to two steps of two prompts (no evaluation rows, so nothing is evaluated);
the step counted is the second: the first also pays for lazy imports and first-step warnings, which are not what
a step is. A named function is a code object whose name does not start with "<" (not a lambda, comprehension or
module body), counted once however often it runs; methods count by their qualified name. Functions called in
threads the step starts are counted too (threading.setprofile); threads already running are not.

docs/architecture.md quotes the numbers; run this before and after a change to the loop to see what it did to them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHRINK = ["optim.steps=2", "optim.prompts_per_step=2", "data.eval=null", "logging.report_to=[]"]


def count_calls(fn, package_dir: Path) -> dict[str, set[str]]:
    """Run ``fn()`` and return the named functions it called, by file (relative to the package's parent)."""
    called: dict[str, set[str]] = {}
    prefix = str(package_dir) + "/"

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if code.co_name.startswith("<") or not code.co_filename.startswith(prefix):
            return
        rel = str(Path(code.co_filename).relative_to(package_dir.parent))
        called.setdefault(rel, set()).add(code.co_qualname)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return called


def measure(extra: list[str]) -> dict[str, set[str]]:
    """The functions step 2 of examples/zero.yaml (shrunk) calls, by file."""
    import kitae
    from kitae.trainer.config import load_train_config
    from kitae.trainer.loop import Trainer

    with tempfile.TemporaryDirectory() as out:
        cfg = load_train_config(ROOT / "examples" / "zero.yaml", SHRINK + [f"output_dir={out}"] + extra)
        trainer = Trainer(cfg)
        try:
            trainer.train_step(1)
            return count_calls(lambda: trainer.train_step(2), Path(kitae.__file__).resolve().parent)
        finally:
            trainer.rollouts.close()
            if trainer.store is not None:
                trainer.store.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--list", action="store_true", help="also list the functions, file by file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another config override")
    args = p.parse_args(argv)
    called = measure(args.set)
    total = sum(len(names) for names in called.values())
    print(f"{total} named functions in {len(called)} files")
    if args.list:
        for file in sorted(called):
            print(f"{file} ({len(called[file])})")
            for name in sorted(called[file]):
                print(f"    {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

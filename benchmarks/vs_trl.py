"""kitae vs TRL's GRPOTrainer on the bundled model and task: seconds per step, accuracy after equal wall time,
peak memory.

    python benchmarks/vs_trl.py [--steps 10] [--wall 0] [--model PATH]

Both sides: the bundled base model, the bundled train split, the same two reward functions (template compliance
and answer correctness, the graders of examples/zero.yaml), group size 8, 8 prompts per step, at most 48 new
tokens, temperature 1.0, learning rate 2e-4, the GRPO loss with no KL term (TRL's default beta=0), on the CPU
in fp32. Each side runs in its own child process (same process tree, one after the other), so peak RSS is its
own. Reported: median seconds per step (the first step is a warm-up and excluded), the ratio, and held-out
pass@1 / compliance on the test split measured with the same evaluation code after each side's training
(with --wall S both train for S seconds; otherwise for --steps steps).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = {"type": "template", "min_chars": 1, "full_chars": 0}
CORRECT = {"type": "answer"}
G, PROMPTS, MAX_NEW, LR, TEMP = 8, 8, 48, 2e-4, 1.0


def held_out(model, tok) -> dict:
    from kitae.data.loader import load_prompts
    from kitae.graders import build_grader
    from kitae.models import BUNDLED_DATA
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.hf import HFEngine
    from kitae.trainer.evaluate import evaluate

    rows = load_prompts(BUNDLED_DATA / "test.jsonl")[:100]
    sp = SamplingParams(temperature=1.0, max_new_tokens=MAX_NEW, seed=1234)
    metrics, _ = evaluate(HFEngine(model, tok), rows, build_grader(CORRECT), k=4, sampling=sp)
    return {k: metrics[k] for k in ("pass@1", "compliance", "len_mean")}


def run_kitae(args) -> dict:
    from kitae.trainer.config import load_train_config
    from kitae.trainer.loop import Trainer

    out = tempfile.mkdtemp(prefix="kitae-vs-trl-")
    cfg = load_train_config(data={
        "name": "bench", "output_dir": out, "model": {"path": args.model or "bundled"},
        "data": {"train": "bundled:arith/train", "eval": None},
        "rewards": [{"name": "template", "grader": TEMPLATE}, {"name": "correct", "grader": CORRECT}],
        "sampling": {"group_size": G, "temperature": TEMP, "max_new_tokens": MAX_NEW},
        "optim": {"steps": 10**6 if args.wall else args.steps, "prompts_per_step": PROMPTS, "lr": LR,
                  "micro_batch_size": G * PROMPTS},
        "logging": {"save_every": 0}, "eval": {"every": 0},
    })
    trainer = Trainer(cfg)
    times, t0 = [], time.perf_counter()
    last = [t0]

    def on_step(step, metrics):
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now
        if (args.wall and now - t0 > args.wall) or (not args.wall and step >= args.steps):
            trainer._stop_requested = True

    trainer.on_step = on_step
    trainer.train()
    return {"step_secs": times, "eval": held_out(trainer.policy, trainer.tokenizer)}


def run_trl(args) -> dict:
    import datasets
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from kitae.data.loader import load_prompts
    from kitae.graders import build_grader
    from kitae.models import BUNDLED_DATA, load_causal_lm, load_tokenizer

    tok = load_tokenizer(args.model)
    model = load_causal_lm(args.model)
    rows = load_prompts(BUNDLED_DATA / "train.jsonl")
    ds = datasets.Dataset.from_list([{"prompt": r["messages"], "reference_answer": r["reference_answer"]} for r in rows])

    def as_reward(spec, name):
        grader = build_grader(spec)

        def reward(prompts, completions, completion_ids, reference_answer, **kw):
            out = []
            for ids, ref in zip(completion_ids, reference_answer):
                text = tok.decode(ids, skip_special_tokens=False)
                finish = "stop" if text.rstrip().endswith("<|im_end|>") else "length"
                s = {"output_text": text, "finish_reason": finish, "completion_tokens": len(ids),
                     "max_completion_length": MAX_NEW}
                out.append(grader.grade_group({"reference_answer": ref}, [s])[0].score)
            return out

        reward.__name__ = name
        return reward

    times, t0 = [], time.perf_counter()

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            now = time.perf_counter()
            times.append(now - self.t)
            if args.wall and now - t0 > args.wall:
                control.should_training_stop = True

    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-vs-kitae-"), per_device_train_batch_size=G * PROMPTS,
        num_generations=G, max_completion_length=MAX_NEW, learning_rate=LR, temperature=TEMP, top_p=1.0,
        beta=0.0, loss_type="grpo", max_steps=10**6 if args.wall else args.steps, logging_steps=1,
        save_strategy="no", report_to=[], bf16=False, use_cpu=True, seed=0, lr_scheduler_type="constant",
        warmup_steps=0, max_grad_norm=1.0, weight_decay=0.0, adam_beta2=0.99, disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[as_reward(TEMPLATE, "template"), as_reward(CORRECT, "correct")],
                          args=config, train_dataset=ds, processing_class=tok, callbacks=[Timer()])
    trainer.train()
    return {"step_secs": times, "eval": held_out(trainer.model, tok)}


def child(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    result = (run_kitae if args.side == "kitae" else run_trl)(args)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(args.out).write_text(json.dumps(result))


def parent(args) -> None:
    results = {}
    for side in ("kitae", "trl"):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        cmd = [sys.executable, __file__, "--side", side, "--out", out, "--steps", str(args.steps), "--wall", str(args.wall),
               "--threads", str(args.threads)]
        if args.model:
            cmd += ["--model", args.model]
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL if not args.verbose else None)
        results[side] = json.loads(Path(out).read_text())
    med = {s: statistics.median(r["step_secs"][1:] or r["step_secs"]) for s, r in results.items()}
    print(f"GRPO on the bundled model: {PROMPTS} prompts x {G} samples/step, <= {MAX_NEW} new tokens, CPU fp32")
    print(f"{'':8}{'steps':>7}{'s/step (median)':>17}{'pass@1':>8}{'compliance':>12}{'peak RSS MB':>13}")
    for s, r in results.items():
        e = r["eval"]
        print(f"{s:8}{len(r['step_secs']):>7}{med[s]:>17.2f}{e['pass@1']:>8.3f}{e['compliance']:>12.3f}{r['peak_rss_mb']:>13.0f}")
    print(f"kitae is {med['trl'] / med['kitae']:.2f}x faster per step than TRL (target: >= 1.5x)")
    print(f"peak memory ratio kitae / TRL: {results['kitae']['peak_rss_mb'] / results['trl']['peak_rss_mb']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="steps per side (when --wall is 0)")
    ap.add_argument("--wall", type=float, default=0, help="train each side for this many seconds instead")
    ap.add_argument("--model", default=None, help="model folder (default: the bundled base model)")
    ap.add_argument("--side", choices=["kitae", "trl"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for each side")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    child(args) if args.side else parent(args)


if __name__ == "__main__":
    main()

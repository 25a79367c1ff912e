"""Peak memory of one GRPO step, kitae against TRL's GRPOTrainer on equal work, printed as a ratio kitae / TRL.

    python benchmarks/memory.py [--models qwen-vocab,bundled] [--prompts 4] [--group 4] [--new 128] [--micro 8]
                                [--chunk N] [--device cpu|cuda] [--threads 1] [--checkpointing] [--tiny]

Models: `qwen-vocab`, a random-weight Qwen2 with Qwen's 151,936-token vocabulary and a tiny body (hidden 64,
2 layers, tied embeddings; built once under --model-dir), where the output layer's logits dominate a step's memory;
and `bundled`, kitae's bundled 2M model (1,024 tokens). Both use the bundled ChatML tokenizer (no Qwen tokenizer is
installed; the model's vocabulary is larger than the tokenizer's, as Qwen's own is: ids past the tokenizer decode to
nothing). The reward, the same function on both sides, is the share of odd token ids in a completion
(`odd_share`), which varies within a group on any model, so every row has an advantage.

The same work on both sides (`side_settings`, checked by tests/test_memory_benchmark.py): one optimizer step over
--prompts prompts x --group samples in file order, at most --new new tokens at temperature 1, forward and backward in
micro-batches of --micro rows (TRL: per_device_train_batch_size = --micro, gradient_accumulation_steps = rows /
--micro, so it generates all rows at once and takes no separate old-log-prob pass, as kitae), the GRPO loss with no
KL term, AdamW, fp32, gradient checkpointing off (on for both with --checkpointing), every row trained (kitae's
`optim.skip_zero_advantage: false`).
The random-weight qwen-vocab model almost never samples an end token, so both sides' completions are --new tokens
long; the bundled model stops where it likes, and the completion tokens each side generated are printed.

Each measurement runs in a fresh process. The baseline is taken once the trainer is built (model loaded); the step
is then run and its peak read in the trainer's step callback (before kitae's end-of-run checkpoint). CPU: the peak
resident set (Linux VmHWM, reset through /proc/self/clear_refs after the baseline; where that cannot be reset,
ru_maxrss, said so) minus the resident set at the baseline. GPU (--device cuda): torch.cuda.max_memory_allocated
(reset at the baseline) minus memory_allocated at the baseline. The step includes what each trainer builds lazily
(TRL's accelerator preparation, both optimizers' state).
Not part of the test suite's pass/fail (tests/test_memory_benchmark.py runs it in --tiny mode and checks its table).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QWEN_VOCAB = 151_936  # Qwen2 / Qwen2.5 / Qwen3's output layer
LR = 1e-5


def odd_share(completions, completion_ids=None, **kwargs) -> list[float]:
    """The share of each completion's token ids that are odd: a reward that varies within a group on any model
    (even one whose tokens decode to nothing). A TRL-style reward function, used by both sides."""
    return [sum(t % 2 for t in ids) / max(1, len(ids)) for ids in completion_ids]


# ---- models ---------------------------------------------------------------------------------------------------
def model_path(name: str, models: Path) -> str:
    """The bundled model, or the random-weight qwen-vocab Qwen2 (built and saved on first use)."""
    from kitae.models import BUNDLED_MODEL, load_tokenizer

    if name == "bundled":
        return str(BUNDLED_MODEL)
    out = models / name
    if not (out / "model.safetensors").exists():
        from transformers import Qwen2Config, Qwen2ForCausalLM

        tok = load_tokenizer(None)
        cfg = Qwen2Config(vocab_size=QWEN_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                          tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        torch.manual_seed(0)
        Qwen2ForCausalLM(cfg).save_pretrained(out)
        tok.save_pretrained(out)
    return str(out)


# ---- the work both sides do -------------------------------------------------------------------------------------
def side_settings(side: str, model: str, work: dict, out_dir: str) -> dict:
    """One side's settings: kitae's config (a dict for load_train_config) or TRL's GRPOConfig keywords."""
    rows = work["prompts"] * work["group"]
    if side == "trl":
        return dict(
            output_dir=out_dir, per_device_train_batch_size=work["micro"],
            gradient_accumulation_steps=rows // work["micro"],
            num_generations=work["group"], max_completion_length=work["new"], learning_rate=LR, temperature=1.0,
            top_p=1.0, top_k=0, repetition_penalty=1.0, beta=0.0, loss_type="grpo", num_iterations=1, max_steps=1,
            logging_steps=1, save_strategy="no", report_to=[], bf16=False, use_cpu=work["device"] == "cpu", seed=0,
            lr_scheduler_type="constant", max_grad_norm=1.0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.99,
            disable_tqdm=True, shuffle_dataset=False, gradient_checkpointing=work.get("checkpointing", False),
            mask_truncated_completions=False,
            scale_rewards="group",
        )
    optim = {"steps": 1, "prompts_per_step": work["prompts"], "lr": LR, "micro_batch_size": work["micro"],
             "skip_zero_advantage": False, "betas": [0.9, 0.99], "weight_decay": 0.0, "max_grad_norm": 1.0}
    if work["chunk"] is not None:
        optim["logprob_chunk_size"] = work["chunk"]
    return {"name": "memory", "output_dir": out_dir, "seed": 0, "threads": work["threads"],
            "model": {"path": model, "gradient_checkpointing": work.get("checkpointing", False)},
            "data": {"train": "bundled:arith/train", "eval": None, "shuffle": False},
            "rewards": [{"name": "odd", "function": "memory:odd_share"}],
            "sampling": {"group_size": work["group"], "temperature": 1.0, "top_p": 1.0, "top_k": 0,
                         "max_new_tokens": work["new"]},
            "algorithm": {"loss": "grpo", "eps_low": 0.2, "eps_high": 0.2, "kl": {"coef": 0.0}, "mu": 1},
            "optim": optim, "logging": {"save_every": 0}, "eval": {"every": 0}}


# ---- measuring --------------------------------------------------------------------------------------------------
def _status_kb(key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


class Peak:
    """The step's peak memory above the baseline taken at :meth:`start` (module docstring), in MB."""

    def __init__(self, device: str):
        self.device, self.how = device, ""

    def start(self) -> None:
        gc.collect()
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            self.how = "torch.cuda.max_memory_allocated - memory_allocated at the baseline"
            return
        self.base = _status_kb("VmRSS") * 1024
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
            self.how = "peak RSS (VmHWM, reset at the baseline) - RSS at the baseline"
        except OSError:
            self.how = "ru_maxrss - RSS at the baseline (VmHWM could not be reset: loading's peak may show)"

    def read(self) -> float:
        if self.device == "cuda":
            return (torch.cuda.max_memory_allocated() - self.base) / 2**20
        if self.how.startswith("peak RSS"):
            peak = _status_kb("VmHWM") * 1024
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return (peak - self.base) / 2**20


def run_kitae(args, work: dict) -> dict:
    from kitae.trainer.config import load_train_config
    from kitae.trainer.loop import Trainer

    cfg = load_train_config(data=side_settings("kitae", args.model, work, tempfile.mkdtemp(prefix="kitae-memory-")))
    trainer = Trainer(cfg)
    peak, seen = Peak(work["device"]), {}

    def on_step(step, m):
        seen.update(peak_mb=peak.read(), tokens=m["len_mean"] * work["prompts"] * work["group"],
                    secs=m["secs_per_step"])

    trainer.on_step = on_step
    peak.start()
    trainer.train()
    return {**seen, "how": peak.how, "did": f"optim.logprob_chunk_size {cfg.optim.logprob_chunk_size}"}


def run_trl(args, work: dict) -> dict:
    import datasets
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from kitae.data.loader import load_prompts
    from kitae.models import BUNDLED_DATA, load_causal_lm, load_tokenizer

    tok = load_tokenizer(args.model)
    model = load_causal_lm(args.model, device="cuda" if work["device"] == "cuda" else "cpu")
    rows = load_prompts(BUNDLED_DATA / "train.jsonl")
    ds = datasets.Dataset.from_list([{"prompt": r["messages"]} for r in rows])
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.hf import HFEngine

    stops = HFEngine(None, tok).ending(SamplingParams()).stop  # stop where kitae stops
    model.generation_config.eos_token_id = [tok.convert_tokens_to_ids(s) for s in stops]
    peak, seen = Peak(work["device"]), {}

    class AtStepEnd(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            lengths = trainer._metrics["train"]["completions/mean_length"]
            seen.update(peak_mb=peak.read(), tokens=lengths[-1] * work["prompts"] * work["group"],
                        secs=time.perf_counter() - self.t0)

    config = GRPOConfig(**side_settings("trl", args.model, work, tempfile.mkdtemp(prefix="trl-memory-")))
    trainer = GRPOTrainer(model=model, reward_funcs=[odd_share], args=config, train_dataset=ds, processing_class=tok,
                          callbacks=[AtStepEnd()])
    peak.start()
    trainer.train()
    did = "full logits of each micro-batch (TRL's _get_per_token_logps_and_entropies)"
    return {**seen, "how": peak.how, "did": did}


def child(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    work = json.loads(args.work)
    result = (run_trl if args.side == "trl" else run_kitae)(args, work)
    Path(args.out).write_text(json.dumps(result))


# ---- the parent -------------------------------------------------------------------------------------------------
def run_child(side: str, model: str, work: dict, args) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, __file__, "--side", side, "--model", model, "--work", json.dumps(work), "--out", out,
           "--threads", str(work["threads"])]
    path = os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])  # kitae's reward "memory:odd_share" is this file's
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    quiet = None if args.verbose else subprocess.DEVNULL
    subprocess.run(cmd, check=True, env=env, stdout=quiet, stderr=quiet)
    return json.loads(Path(out).read_text())


def work_of(args) -> dict:
    if args.tiny:  # the test's mode: seconds, not minutes
        args.prompts, args.group, args.new, args.micro = 2, 2, 8, 2
    if (args.prompts * args.group) % args.micro:
        raise SystemExit(f"--micro {args.micro} must divide the rows ({args.prompts} x {args.group})")
    return {"prompts": args.prompts, "group": args.group, "new": args.new, "micro": args.micro, "chunk": args.chunk,
            "device": args.device, "threads": args.threads, "checkpointing": args.checkpointing}


def bench_model(name: str, work: dict, args) -> dict:
    path = model_path(name, Path(args.model_dir))  # built before any measurement
    out = {}
    for side in ("kitae", "trl"):
        t0 = time.perf_counter()
        out[side] = run_child(side, path, work, args)
        print(f"  {name}: {side} done in {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def report(name: str, work: dict, sides: dict) -> None:
    vocab = QWEN_VOCAB if name == "qwen-vocab" else 1024
    rows = work["prompts"] * work["group"]
    print(f"\n{name} (vocabulary {vocab:,}): {work['prompts']} prompts x {work['group']} samples, <= {work['new']} new "
          f"tokens, micro-batches of {work['micro']} rows, GRPO, fp32, {work['device']}, {work['threads']} thread(s), "
          f"gradient checkpointing {'on' if work.get('checkpointing') else 'off'} on both")
    print(f"{'':8}{'peak MB':>9}{'tokens':>8}{'step s':>8}  what it did")
    for side, r in sides.items():
        print(f"{side:8}{r['peak_mb']:>9.0f}{r['tokens']:>8.0f}{r['secs']:>8.1f}  {r['did']}")
    k, t = sides["kitae"], sides["trl"]
    print(f"measured as: {k['how']}")
    print(f"kitae / TRL peak memory ({name}): {k['peak_mb'] / t['peak_mb']:.2f}x "
          f"({k['tokens']:.0f} vs {t['tokens']:.0f} completion tokens in {rows} rows)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen-vocab,bundled", help="from qwen-vocab, bundled")
    ap.add_argument("--prompts", type=int, default=4, help="prompts in the step")
    ap.add_argument("--group", type=int, default=4, help="samples per prompt")
    ap.add_argument("--new", type=int, default=128, help="most new tokens per sample")
    ap.add_argument("--micro", type=int, default=8, help="rows per forward/backward (both sides)")
    ap.add_argument("--chunk", type=int, default=None, help="kitae's optim.logprob_chunk_size (default: its default)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for each side")
    ap.add_argument("--checkpointing", action="store_true", help="gradient checkpointing on for both sides")
    ap.add_argument("--tiny", action="store_true", help="2 prompts x 2 samples, 8 new tokens (the test's mode)")
    ap.add_argument("--model-dir", default=str(Path(tempfile.gettempdir()) / "kitae-memory-models"),
                    help="where the qwen-vocab model is built and kept")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--side", choices=("kitae", "trl"), help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        return child(args)
    work = work_of(args)
    for name in args.models.split(","):
        report(name, work, bench_model(name, work, args))


if __name__ == "__main__":
    main()

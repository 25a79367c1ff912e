"""kitae vs TRL's GRPOTrainer at three model sizes on equal settings: seconds per step and per generated token.

    python benchmarks/vs_trl.py [--params 2M,20M,100M] [--pairs N] [--steps N] [--checkpointing] [--async]

Models: the bundled 2M base model, and Llamas built from a config with the bundled tokenizer at about 20M
(hidden 512, 6 layers) and 100M parameters (hidden 1024, 8 layers), random weights, saved once under
--models (default /tmp/kitae-vs-trl-models) and loaded by both sides from that folder.

The same for both sides (`side_settings`, asserted by tests/test_vs_trl_benchmark.py): the bundled train split in
file order (kitae `data.shuffle: false`, TRL `shuffle_dataset=False`: the same prompts at every step), 16
prompts x 4 samples per step, at most 48 new tokens, temperature 1.0, top_p 1, lr 2e-4 constant, AdamW betas
(0.9, 0.99), no weight decay, gradient norm clipped to 1, the GRPO loss with no KL term (TRL's beta = 0), CPU
fp32, --threads torch threads each (default 1), gradient checkpointing off on both (TRL's default is on). Both
stop at the same end markers: kitae's default stops for the model (ChatML's `<|im_end|>` and `<|endoftext|>`,
and the model's own ends), set as TRL's `generation_config.eos_token_id` (TRL's default stops only at the
model's eos, `<|im_end|>`, and decodes past `<|endoftext|>`). The settings whose library defaults differ are
printed with what both were set to.

Rewards, the same functions on both sides: for the bundled 2M model, the graders of examples/zero.yaml (template
compliance, answer correctness); for the random-weight 20M and 100M models, which never earn those (every group
constant, so kitae would skip every row), `digit_share`: the share of a completion's characters that are digits,
which a random model earns partly, so rewards vary within groups.

Arms per size, each in its own child process, taking turns (pair 1 in order, pair 2 reversed, ...) so load from
other programs hits all alike; each child's first step is a warm-up, not counted:
- kitae: its defaults where they do not change the work (rows with advantage 0 left out of the update);
- kitae-all-rows: `optim.skip_zero_advantage: false`, every row trained, as TRL trains them (always run);
- trl: GRPOTrainer;
- with --checkpointing, kitae-gc and trl-gc: both with gradient checkpointing on;
- with --async, kitae-async: `sampling.async: true` (rollouts overlap the update), against synchronous TRL;
  skipped, saying why, when this kitae's config does not take `sampling.async`.
Every ratio is TRL / kitae, per step and per generated token (seconds per step over completion tokens per
step), with the share of rows kitae skipped beside it. The load average before and after each size says
whether the machine was busy. --eval adds held-out pass@1 after each child's training. Not part of the test
suite (tests/test_vs_trl_benchmark.py checks its settings).
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
sys.path.insert(0, str(ROOT))

TEMPLATE = {"type": "template", "min_chars": 1, "full_chars": 0, "penalty": -1.0}  # as examples/zero.yaml
CORRECT = {"type": "answer"}
G, PROMPTS, MAX_NEW, LR, TEMP = 4, 16, 48, 2e-4, 1.0
SHAPES = {"20M": (512, 6, 1376, 8), "100M": (1024, 8, 2816, 16)}  # hidden, layers, intermediate, heads
DEFAULT_STEPS = {"2M": 6, "20M": 3, "100M": 3}  # per child, the warm-up included
DEFAULT_PAIRS = {"2M": 2, "20M": 2, "100M": 1}
SIDES = ("kitae", "kitae-all-rows", "trl", "kitae-gc", "trl-gc", "kitae-async")
BASELINE = {"kitae": "trl", "kitae-all-rows": "trl", "kitae-async": "trl", "kitae-gc": "trl-gc"}


def rewards_for(size: str) -> str:
    """"task" (the graders of examples/zero.yaml) for the trained 2M model; "digits" for the random-weight ones."""
    return "task" if size == "2M" else "digits"


def digit_share(completions, **kwargs) -> list[float]:
    """The share of each completion's characters that are digits, end markers left out: a reward a random-weight
    model earns partly, so rewards vary within a group. A TRL-style reward function, used by both sides."""
    out = []
    for c in completions:
        text = c[-1]["content"] if isinstance(c, list) else c
        for marker in ("<|im_end|>", "<|endoftext|>"):
            text = text.replace(marker, "")
        out.append(sum(ch.isdigit() for ch in text) / max(1, len(text)))
    return out


def end_markers(tok) -> tuple[list[str], list[int]]:
    """kitae's default stop strings for this tokenizer and their token ids: what both sides stop at. Each must be
    one token (TRL stops at token ids only)."""
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.hf import HFEngine

    stops = HFEngine(None, tok).ending(SamplingParams()).stop
    ids = [tok.encode(s, add_special_tokens=False) for s in stops]
    if any(len(i) != 1 for i in ids):
        raise ValueError(f"stop strings {stops} are not one token each ({ids}): TRL cannot stop at them alike")
    return stops, [i[0] for i in ids]


def async_supported() -> str | None:
    """None when this kitae's config takes `sampling.async: true`; else why not (the kitae-async arm is skipped)."""
    from kitae.trainer.config import load_train_config

    try:
        load_train_config(data={"rewards": [{"name": "template", "grader": TEMPLATE}], "sampling": {"async": True}})
    except Exception as exc:  # noqa: BLE001 - any refusal means the arm cannot run
        return f"this kitae's config does not take sampling.async ({type(exc).__name__}: {str(exc)[:160]})"
    return None


def side_settings(side: str, model: str, size: str, steps: int, threads: int, out_dir: str) -> dict:
    """The settings of one arm: kitae's config (a dict for load_train_config) or TRL's GRPOConfig keywords and
    its eos ids. The two sides' numbers are the same by construction; tests/test_vs_trl_benchmark.py checks."""
    from kitae.models import load_tokenizer

    _, end_ids = end_markers(load_tokenizer(model))
    gc = side.endswith("-gc")
    if side.startswith("trl"):
        return {"eos_token_id": end_ids, "config": dict(
            output_dir=out_dir, per_device_train_batch_size=G * PROMPTS, num_generations=G,
            max_completion_length=MAX_NEW, learning_rate=LR, temperature=TEMP, top_p=1.0, top_k=0,
            repetition_penalty=1.0, beta=0.0, loss_type="grpo", num_iterations=1, epsilon=0.2, max_steps=steps,
            logging_steps=1, save_strategy="no", report_to=[], bf16=False, use_cpu=True, seed=0,
            lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0, weight_decay=0.0, adam_beta1=0.9,
            adam_beta2=0.99, disable_tqdm=True, shuffle_dataset=False, gradient_checkpointing=gc,
            mask_truncated_completions=False, scale_rewards="group",
        )}
    if rewards_for(size) == "task":
        rewards = [{"name": "template", "grader": TEMPLATE}, {"name": "correct", "grader": CORRECT}]
    else:
        rewards = [{"name": "digits", "function": "vs_trl:digit_share"}]
    sampling = {"group_size": G, "temperature": TEMP, "top_p": 1.0, "top_k": 0, "max_new_tokens": MAX_NEW}
    if side == "kitae-async":
        sampling["async"] = True  # the hook for sampling.async (rollouts overlap the update)
    return {"name": "bench", "output_dir": out_dir, "seed": 0, "threads": threads,
            "model": {"path": model, "gradient_checkpointing": gc},
            "data": {"train": "bundled:arith/train", "eval": None, "shuffle": False},
            "rewards": rewards, "sampling": sampling,
            "algorithm": {"loss": "grpo", "eps_low": 0.2, "eps_high": 0.2, "kl": {"coef": 0.0}, "mu": 1},
            "optim": {"steps": steps, "prompts_per_step": PROMPTS, "lr": LR, "micro_batch_size": G * PROMPTS,
                      "skip_zero_advantage": side != "kitae-all-rows", "betas": [0.9, 0.99], "weight_decay": 0.0,
                      "max_grad_norm": 1.0, "scheduler": "constant", "warmup_steps": 0},
            "logging": {"save_every": 0}, "eval": {"every": 0}}


def defaults_that_differ() -> list[tuple[str, object, object, str]]:
    """(setting, TRL's default, kitae's default, what both sides run with) where the two libraries differ."""
    from trl import GRPOConfig

    from kitae.trainer.config import TrainConfig

    trl = {k: f.default for k, f in GRPOConfig.__dataclass_fields__.items()}
    k = TrainConfig()
    rows = [
        ("gradient checkpointing", trl["gradient_checkpointing"], k.model.gradient_checkpointing,
         "off (both on in the -gc arms)"),
        ("loss", trl["loss_type"], k.algorithm.loss.type, "grpo"),
        ("KL coefficient", trl["beta"], k.algorithm.kl.coef, "0"),
        ("learning rate", trl["learning_rate"], k.optim.lr, f"{LR}"),
        ("max new tokens", trl["max_completion_length"], k.sampling.max_new_tokens, f"{MAX_NEW}"),
        ("samples per prompt", trl["num_generations"], k.sampling.group_size, f"{G}"),
        ("AdamW beta2", trl["adam_beta2"], k.optim.betas[1], "0.99"),
        ("weight decay", trl["weight_decay"], k.optim.weight_decay, "0"),
        ("lr schedule", trl["lr_scheduler_type"], k.optim.scheduler, "constant"),
        ("prompt order shuffled", trl["shuffle_dataset"], k.data.shuffle, "no: file order"),
        ("stops at", "the model's eos ids", "ChatML ends + the model's", "kitae's (TRL's eos ids set to them)"),
        ("rows with advantage 0", "trained", "left out", "kitae-all-rows trains them"),
    ]
    return [r for r in rows if str(r[1]) != str(r[2])]


# ---- models -------------------------------------------------------------------------------------------------
def model_path(size: str, models: Path) -> str:
    """The bundled model for 2M; otherwise a Llama built from a config (built and saved on first use)."""
    if size == "2M":
        from kitae.models import BUNDLED_MODEL

        return str(BUNDLED_MODEL)
    out = models / size
    if not (out / "model.safetensors").exists():
        from transformers import LlamaConfig, LlamaForCausalLM

        from kitae.models import load_tokenizer

        tok = load_tokenizer(None)
        hidden, layers, inter, heads = SHAPES[size]
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, intermediate_size=inter,
                          num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=256,
                          tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).save_pretrained(out)
        tok.save_pretrained(out)
    return str(out)


def mm_peak_gflops(repeats: int = 5, n: int = 2048) -> float:
    """Best fp32 torch.mm rate on this process's threads (GFLOP/s)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class UpdateCounter:
    """Positions (batch x sequence) that the model's forwards compute with gradients on: the update's work."""

    def __init__(self, model):
        self.positions = 0
        self.params = sum(p.numel() for p in model.parameters())
        model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if torch.is_grad_enabled() and ids is not None:
            self.positions += ids.numel()

    def take(self) -> int:
        n, self.positions = self.positions, 0
        return n


# ---- the two sides ------------------------------------------------------------------------------------------
def held_out(model, tok) -> dict:
    from kitae.data.loader import load_prompts
    from kitae.graders import build_grader
    from kitae.models import BUNDLED_DATA
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.hf import HFEngine
    from kitae.scoring.evaluate import evaluate

    rows = load_prompts(BUNDLED_DATA / "test.jsonl")[:100]
    sp = SamplingParams(temperature=1.0, max_new_tokens=MAX_NEW, seed=1234)
    metrics, _ = evaluate(HFEngine(model, tok), rows, build_grader(CORRECT), k=4, sampling=sp)
    return {k: metrics[k] for k in ("pass@1", "compliance", "len_mean")}


def run_kitae(args) -> dict:
    from kitae.trainer.config import load_train_config
    from kitae.trainer.loop import Trainer

    cfg = load_train_config(data=side_settings(args.side, args.model, args.size, args.steps, args.threads,
                                               tempfile.mkdtemp(prefix="kitae-vs-trl-")))
    trainer = Trainer(cfg)
    counter = UpdateCounter(trainer.policy)
    steps = []

    def on_step(step, m):
        steps.append({"secs": m["secs_per_step"], "generate": m["secs_generate"], "update": m["secs_train"],
                      "positions": counter.take(), "skipped_rows": m["skipped_rows"], "pad_frac": m["pad_frac"],
                      "rows": G * PROMPTS, "len_mean": m["len_mean"]})

    trainer.on_step = on_step
    trainer.train()
    return {"steps": steps, "params": counter.params,
            "eval": held_out(trainer.policy, trainer.tokenizer) if args.eval else None}


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

    settings = side_settings(args.side, args.model, args.size, args.steps, args.threads,
                             tempfile.mkdtemp(prefix="trl-vs-kitae-"))
    model.generation_config.eos_token_id = settings["eos_token_id"]  # stop where kitae stops

    def as_reward(spec, name):
        grader = build_grader(spec)

        def reward(prompts, completions, completion_ids, reference_answer, **kw):
            out = []
            for ids, ref in zip(completion_ids, reference_answer):
                text = tok.decode(ids, skip_special_tokens=False)
                finish = "stop" if ids and ids[-1] in settings["eos_token_id"] else "length"
                s = {"output_text": text, "finish_reason": finish, "completion_tokens": len(ids),
                     "max_completion_length": MAX_NEW}
                out.append(grader.grade_group({"reference_answer": ref}, [s])[0].score)
            return out

        reward.__name__ = name
        return reward

    counter = UpdateCounter(model)
    steps, gen = [], [0.0]

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t, gen[0] = time.perf_counter(), 0.0
            counter.take()

        def on_step_end(self, a, state, control, **kw):
            secs = time.perf_counter() - self.t
            lengths = trainer._metrics["train"]["completions/mean_length"]
            steps.append({"secs": secs, "generate": gen[0], "update": secs - gen[0], "positions": counter.take(),
                          "skipped_rows": 0.0, "pad_frac": None, "rows": G * PROMPTS,
                          "len_mean": lengths[-1] if lengths else float("nan")})

    config = GRPOConfig(**settings["config"])
    if rewards_for(args.size) == "task":
        reward_funcs = [as_reward(TEMPLATE, "template"), as_reward(CORRECT, "correct")]
    else:
        reward_funcs = [digit_share]
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=config, train_dataset=ds,
                          processing_class=tok, callbacks=[Timer()])
    generate = trainer._generate_and_score_completions

    def timed_generate(*a, **kw):  # generation, scoring and advantages: TRL's rollout phase
        t0 = time.perf_counter()
        try:
            return generate(*a, **kw)
        finally:
            gen[0] += time.perf_counter() - t0

    trainer._generate_and_score_completions = timed_generate
    trainer.train()
    return {"steps": steps, "params": counter.params, "eval": held_out(trainer.model, tok) if args.eval else None}


def child(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    peak = mm_peak_gflops()
    result = (run_trl if args.side.startswith("trl") else run_kitae)(args)
    result["mm_peak_gflops"] = peak
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(args.out).write_text(json.dumps(result))


# ---- the parent: pairs, medians, the table --------------------------------------------------------------------
def run_child(side: str, size: str, steps: int, args) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, __file__, "--side", side, "--size", size, "--out", out, "--steps", str(steps),
           "--threads", str(args.threads), "--model", model_path(size, Path(args.models))]
    if args.eval:
        cmd += ["--eval"]
    # benchmarks/ on the path: kitae's reward function "vs_trl:digit_share" is this file's
    path = os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    subprocess.run(cmd, check=True, env=env, stdout=None if args.verbose else subprocess.DEVNULL,
                   stderr=None if args.verbose else subprocess.DEVNULL)
    return json.loads(Path(out).read_text())


def summarize(runs: list[dict]) -> dict:
    """Steps after each child's warm-up, pooled over the pairs."""
    steps = [s for r in runs for s in r["steps"][1:]]
    med = lambda key: statistics.median(s[key] for s in steps)  # noqa: E731
    update_flop = 6 * runs[0]["params"] * sum(s["positions"] for s in steps)
    pads = [s["pad_frac"] for s in steps if s["pad_frac"] is not None]
    return {
        "steps": len(steps), "secs": med("secs"), "len_mean": med("len_mean"), "secs_min": min(s["secs"] for s in steps),
        "secs_max": max(s["secs"] for s in steps), "generate": med("generate"), "update": med("update"),
        "skipped": sum(s["skipped_rows"] for s in steps) / sum(s["rows"] for s in steps),
        "pad_frac": statistics.fmean(pads) if pads else None,
        "gflops": update_flop / max(1e-9, sum(s["update"] for s in steps)) / 1e9,
        "mm_peak": statistics.median(r["mm_peak_gflops"] for r in runs),
        "rss": max(r["peak_rss_mb"] for r in runs),
        "per_pair": [statistics.median(s["secs"] for s in r["steps"][1:]) for r in runs],
        # seconds per generated completion token, per pair: each step's seconds over its tokens (rows x mean length)
        "per_token_pair": [statistics.median(s["secs"] / max(1e-9, s["rows"] * s["len_mean"]) for s in r["steps"][1:])
                           for r in runs],
        "per_token": statistics.median(s["secs"] / max(1e-9, s["rows"] * s["len_mean"]) for s in steps),
        "eval": [r["eval"] for r in runs if r.get("eval")],
    }


def arms(args) -> tuple[list[str], dict[str, str]]:
    """The arms to run, and those skipped with the reason."""
    sides, skipped = ["kitae", "kitae-all-rows", "trl"], {}
    if args.checkpointing:
        sides += ["kitae-gc", "trl-gc"]
    if args.use_async:
        why = async_supported()
        if why is None:
            sides.append("kitae-async")
        else:
            skipped["kitae-async"] = why
    return sides, skipped


def bench_size(size: str, args) -> dict:
    sides, skipped = arms(args)
    steps = args.steps or DEFAULT_STEPS[size]
    pairs = args.pairs or DEFAULT_PAIRS[size]
    model_path(size, Path(args.models))  # built before the clock starts
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for p in range(pairs):
        for side in sides if p % 2 == 0 else sides[::-1]:
            runs[side].append(run_child(side, size, steps, args))
            print(f"  {size} pair {p + 1}/{pairs}: {side} done ({os.getloadavg()[0]:.1f} load)", flush=True)
    return {"size": size, "load": (load_before[0], os.getloadavg()[0]), "skipped_arms": skipped,
            "sides": {s: summarize(r) for s, r in runs.items()}}


def report(result: dict, threads: int) -> None:
    size, sides = result["size"], result["sides"]
    lo, hi = result["load"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    busy = "busy" if max(lo, hi) > cores * 0.75 else "quiet"
    reward = "template + answer graders" if rewards_for(size) == "task" else "digit_share"
    print(f"\n{size}: {PROMPTS} prompts x {G} samples/step, <= {MAX_NEW} new tokens, GRPO, beta 0, CPU fp32, "
          f"{threads} thread(s), rewards: {reward}; load average {lo:.1f} -> {hi:.1f} on {cores} cores ({busy})")
    print(f"{'':16}{'steps':>6}{'s/step':>8}{'range':>14}{'generate':>10}{'update':>8}{'tokens':>8}{'skipped':>9}"
          f"{'pad':>6}{'GFLOP/s':>9}{'mm peak':>9}{'RSS MB':>8}")
    for name, s in sides.items():
        pad = f"{s['pad_frac']:.0%}" if s["pad_frac"] is not None else "-"
        print(f"{name:16}{s['steps']:>6}{s['secs']:>8.2f}{s['secs_min']:>7.2f}-{s['secs_max']:<6.2f}{s['generate']:>10.2f}"
              f"{s['update']:>8.2f}{s['len_mean']:>8.1f}{s['skipped']:>9.0%}{pad:>6}{s['gflops']:>9.1f}{s['mm_peak']:>9.1f}"
              f"{s['rss']:>8.0f}")
        for e in s["eval"]:
            print(f"{'':16}held-out pass@1 {e['pass@1']:.3f}, compliance {e['compliance']:.3f}")
    for arm, base in BASELINE.items():
        if arm not in sides or base not in sides:
            continue
        k, t = sides[arm], sides[base]
        step = [b / a for b, a in zip(t["per_pair"], k["per_pair"])]
        tok = [b / a for b, a in zip(t["per_token_pair"], k["per_token_pair"])]
        print(f"{base} / {arm}: {t['secs'] / k['secs']:.2f}x per step (pairs {min(step):.2f}-{max(step):.2f}x), "
              f"{t['per_token'] / k['per_token']:.2f}x per generated token (pairs {min(tok):.2f}-{max(tok):.2f}x); "
              f"{arm} skipped {k['skipped']:.0%} of its rows")
    for arm, why in result["skipped_arms"].items():
        print(f"{arm}: not run: {why}")


def print_settings() -> None:
    print("Settings whose defaults differ between the two (setting: TRL's default / kitae's default -> both run with):")
    for name, trl, kitae, both in defaults_that_differ():
        print(f"  {name}: {trl} / {kitae} -> {both}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="2M,20M,100M", help="model sizes, from 2M, 20M, 100M")
    ap.add_argument("--pairs", type=int, default=0, help="rounds of every arm per size (default: 2, 2, 1)")
    ap.add_argument("--steps", type=int, default=0, help="steps per child, the warm-up included (default: 6, 3, 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for each side")
    ap.add_argument("--models", default=str(Path(tempfile.gettempdir()) / "kitae-vs-trl-models"),
                    help="where the 20M and 100M models are built and kept")
    ap.add_argument("--checkpointing", action="store_true",
                    help="also the arm with gradient checkpointing on for both (kitae-gc, trl-gc)")
    ap.add_argument("--async", dest="use_async", action="store_true",
                    help="also kitae with sampling.async: true against synchronous TRL (skipped when not supported)")
    ap.add_argument("--eval", action="store_true", help="held-out pass@1 after each child's training")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--size", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        return child(args)
    print_settings()
    results = []
    for size in args.params.split(","):
        results.append(bench_size(size, args))
        report(results[-1], args.threads)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

"""The prepared device check of the memory plan: QLoRA GRPO steps on one GPU, peak memory against `kitae plan`'s.

    python benchmarks/gpu_qlora.py                        # CUDA: Qwen2.5-0.5B's shape, 4-bit NF4 + LoRA, < 8 min
    python benchmarks/gpu_qlora.py --device cpu --tiny    # the same code on CPU with a tiny model, seconds

Needs torch, transformers, accelerate and peft, and bitsandbytes for the 4-bit base (a wheel carried to the
device; without it the script prints "skipped 4-bit: bitsandbytes not installed" and runs LoRA on a bf16 base).
No download: a Qwen2-shaped model with random weights (Qwen2.5-0.5B's shape: hidden 896, 24 layers, 14 heads, 2
KV heads, MLP 4864, vocabulary 151,936, tied embeddings) is built and saved here, then loaded quantized.

Each step is GRPO as kitae's trainer runs it, written out with those libraries alone (kitae's trainer itself
cannot load a quantized base on this branch): ``--prompts`` random prompts of ``--prompt-tokens`` ids, ``--group-size``
samples each decoded at once (every sample runs to ``--max-new-tokens``: fixed work), a reward that varies within
groups (the share of even token ids), group-normalised advantages, and the update over micro-batches of
``--micro-batch`` rows: the policy's log-probs of the sampled tokens from fp32 logits of every completion position
(as kitae does without chunked log-probs), the clipped-ratio loss, backward, AdamW on the adapter. Printed: each
step's peak ``torch.cuda.max_memory_allocated``, completion tokens per second of generation and of the update,
and the memory plan's peak for the same settings (kitae.trainer.memory_plan, from the saved config.json) without
its stated CUDA overhead (max_memory_allocated does not count the CUDA context), and their ratio.
Not part of the test suite's pass/fail (tests/trainer/test_gpu_qlora_benchmark.py runs the CPU mode).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from gpu import QWEN2_0_5B, TINY  # noqa: E402  (the model shapes of benchmarks/gpu.py, the other device check)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SKIPPED_4BIT = "skipped 4-bit: bitsandbytes not installed"


def build_model(folder: Path, tiny: bool) -> int:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**(TINY if tiny else QWEN2_0_5B), bos_token_id=None, eos_token_id=None))
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def load_policy(folder: Path, args, four_bit: bool):
    """The saved model, 4-bit NF4 (double quant, bf16 compute) when `four_bit`, else in ``--dtype``; a LoRA adapter."""
    import peft
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    dtype = getattr(torch, args.dtype)
    kw = {"dtype": dtype}
    if four_bit:
        kw["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                       bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype)
    model = AutoModelForCausalLM.from_pretrained(folder, **kw).to(args.device)
    if four_bit:
        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=args.gradient_checkpointing)
    elif args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    lora = peft.LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules=TARGETS, task_type="CAUSAL_LM")
    # train mode throughout, sampling too (nothing here drops out): bitsandbytes 0.50 on a CPU with AVX512-BF16
    # repacks a 4-bit layer for inference at its first forward in eval mode (from_pretrained's mode), and every
    # later training forward then adds the bias in place on a leaf ("a view of a leaf Variable ...")
    return peft.get_peft_model(model, lora).train()


def planned_peak(folder: Path, args, four_bit: bool) -> float:
    """The memory plan's trainer peak for these settings, less its stated CUDA overhead, in GiB."""
    import yaml

    from kitae.trainer import memory_plan as mp

    model = {"path": str(folder), "dtype": args.dtype, "master_weights": "dtype",
             "lora": {"r": args.lora_r, "alpha": 2 * args.lora_r, "target_modules": TARGETS},
             "gradient_checkpointing": args.gradient_checkpointing}
    if four_bit:
        model["quantization"] = {"bits": 4, "type": "nf4", "double_quant": True, "compute_dtype": args.dtype}
    cfg = {"model": model, "data": {"eval": None}, "rewards": [{"name": "even", "grader": {"type": "answer"}}],
           "sampling": {"group_size": args.group_size, "max_new_tokens": args.max_new_tokens},
           "optim": {"prompts_per_step": args.prompts, "micro_batch_size": args.micro_batch}}
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cuda = args.device == "cuda"
    plan = mp.make_plan(mp.load_setup(path, cuda=cuda, prompt_tokens=args.prompt_tokens))
    print(mp.format_plan(plan), flush=True)
    overhead = mp.CUDA_OVERHEAD if cuda else mp.CPU_OVERHEAD
    return (plan.devices[0].peak - overhead) / 2**30


def grpo_step(policy, optimizer, args) -> dict[str, float]:
    """One GRPO step (see the module docstring); its timings and token counts."""
    dev, g = args.device, args.group_size
    vocab = policy.config.vocab_size
    prompts = torch.randint(0, vocab, (args.prompts, args.prompt_tokens), device=dev)
    t0 = time.perf_counter()
    with torch.no_grad():
        seqs = policy.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                               max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
                               num_return_sequences=g, pad_token_id=0)  # [P*G, prompt + new]
    _sync(dev)
    t1 = time.perf_counter()
    completion = seqs[:, args.prompt_tokens:]  # [P*G, C]
    reward = (completion % 2 == 0).float().mean(dim=1).view(-1, g)  # [P, G]
    adv = ((reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-4)).view(-1)  # [P*G]
    n_rows, tokens = seqs.shape[0], completion.numel()
    for start in range(0, n_rows, args.micro_batch):
        rows = slice(start, start + args.micro_batch)
        logits = policy(input_ids=seqs[rows]).logits[:, args.prompt_tokens - 1:-1].float()  # [b, C, V]
        logp = logits.gather(-1, completion[rows, :, None]).squeeze(-1) - torch.logsumexp(logits, -1)  # [b, C]
        ratio = torch.exp(logp - logp.detach())
        loss = -(torch.min(ratio * adv[rows, None], ratio.clamp(0.8, 1.2) * adv[rows, None])).sum() / tokens
        loss.backward()
        del logits, logp, ratio, loss
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    _sync(dev)
    t2 = time.perf_counter()
    return {"gen_tokens_per_s": tokens / (t1 - t0), "train_tokens_per_s": tokens / (t2 - t1), "secs": t2 - t0}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model instead of Qwen2.5-0.5B's shape")
    ap.add_argument("--steps", type=int, default=5, help="steps (the first is warm-up)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--dtype", default=None, help="compute dtype (default: bfloat16 on cuda, float32 on cpu)")
    ap.add_argument("--max-seconds", type=float, default=420, help="stop stepping once the run has used this long")
    args = ap.parse_args(argv)
    args.dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    return args


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse(argv)
    start = time.monotonic()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --device cpu --tiny for the CPU check")
    four_bit = importlib.util.find_spec("bitsandbytes") is not None
    if not four_bit:
        print(SKIPPED_4BIT + f" (LoRA on a {args.dtype} base instead)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        params = build_model(folder, args.tiny)
        gpu = torch.cuda.get_device_name() if args.device == "cuda" else "none"
        print(f"torch {torch.__version__}, device {args.device} ({gpu}); {params / 1e6:.1f}M parameters, "
              f"{'4-bit NF4' if four_bit else args.dtype} base, LoRA r {args.lora_r}; {args.prompts} prompts x "
              f"{args.group_size} samples x {args.max_new_tokens} new tokens after {args.prompt_tokens}", flush=True)
        planned = planned_peak(folder, args, four_bit)
        policy = load_policy(folder, args, four_bit)
        optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-5)
        steps = []
        for step in range(1, args.steps + 1):
            if args.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            m = grpo_step(policy, optimizer, args)
            m["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else float("nan")
            steps.append(m)
            print(f"  step {step}: {m['secs']:.2f}s, generate {m['gen_tokens_per_s']:.0f} tok/s, update "
                  f"{m['train_tokens_per_s']:.0f} tok/s, peak {m['peak_gib']:.2f} GiB", flush=True)
            if time.monotonic() - start > args.max_seconds and step < args.steps:
                print(f"  stopped after {step} steps: --max-seconds {args.max_seconds:g} reached", flush=True)
                break
    kept = steps[1:] or steps
    out = {"gen_tokens_per_s": statistics.median(m["gen_tokens_per_s"] for m in kept),
           "train_tokens_per_s": statistics.median(m["train_tokens_per_s"] for m in kept),
           "peak_gib": max(m["peak_gib"] for m in steps), "planned_gib": planned, "four_bit": four_bit}
    print(f"peak {out['peak_gib']:.2f} GiB measured, {planned:.2f} GiB planned (without the CUDA overhead): "
          f"measured/planned {out['peak_gib'] / planned:.2f}; generate {out['gen_tokens_per_s']:.0f} tok/s, "
          f"update {out['train_tokens_per_s']:.0f} tok/s; total {time.monotonic() - start:.0f}s", flush=True)
    return out


if __name__ == "__main__":
    main()

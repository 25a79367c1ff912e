"""Rollout-engine throughput against plain `model.generate`, and the base model's measured quality.

    python benchmarks/generate.py [--model PATH] [--prompts 32] [-n 8] [--max-new-tokens 48] [--repeats 3]
                                  [--eval-k 4] [--profile 0]

Both sides get the same prompts, the same sampling (temperature 1.0, top_p 1.0) and the same stop at
`<|im_end|>`; both return per-token log-probs (generate via `output_scores` + `compute_transition_scores`, as
TRL's older generation path did). Reported: generated tokens per second, median over --repeats runs, and the
ratio engine / generate. The baseline without log-probs is printed too. Then the base model's template
compliance and accuracy on the bundled test split (pass@1 over k samples), measured with the same engine
(--eval-k 0: not). --profile N: first `cProfile` one engine call and print its N costliest functions.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from kitae.chat import IM_END
from kitae.data.loader import load_prompts
from kitae.graders import build_grader
from kitae.models import BUNDLED_DATA, load_causal_lm, load_tokenizer
from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine, left_pad
from kitae.scoring.evaluate import evaluate


def engine_run(engine: HFEngine, prompts, n: int, max_new: int, seed: int) -> int:
    # stop at <|im_end|> only, as generate() does below, so both sides do the same work
    sp = SamplingParams(temperature=1.0, max_new_tokens=max_new, seed=seed, stop=[IM_END])
    groups = engine.generate(prompts, n, sp)
    return sum(c.num_tokens for g in groups for c in g)


def generate_run(model, tok, prompts, n: int, max_new: int, seed: int, logprobs: bool) -> int:
    ids = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in ids]
    input_ids, attn = left_pad(ids, tok.pad_token_id, model.device)
    end = tok.convert_tokens_to_ids(IM_END)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids, attention_mask=attn, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
            max_new_tokens=max_new, num_return_sequences=n, eos_token_id=end, pad_token_id=tok.pad_token_id,
            return_dict_in_generate=True, output_scores=logprobs,
        )
    if logprobs:
        model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    new = out.sequences[:, input_ids.shape[1] :]
    # count tokens up to and including the first end marker (what a sample really generated)
    done = (new == end).int().cumsum(-1)
    return int(((done == 0) | ((done == 1) & (new == end))).sum())


def median_rate(fn, repeats: int) -> tuple[float, float]:
    rates, secs = [], []
    for r in range(repeats):
        t0 = time.perf_counter()
        tokens = fn(r)
        dt = time.perf_counter() - t0
        rates.append(tokens / dt)
        secs.append(dt)
    return statistics.median(rates), statistics.median(secs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model folder (default: the bundled base model)")
    ap.add_argument("--data", default=str(BUNDLED_DATA / "test.jsonl"))
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--eval-k", type=int, default=4, help="samples per prompt of the base model's evaluation; 0: none")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile", type=int, default=0, help="cProfile one engine call first; print this many rows")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    rows = load_prompts(args.data)
    prompts = [r["messages"] for r in rows[: args.prompts]]
    tok = load_tokenizer(args.model)
    model = load_causal_lm(args.model).eval()
    engine = HFEngine(model, tok)
    run = lambda fn: median_rate(fn, args.repeats)

    engine_run(engine, prompts[:2], 2, 4, 0)  # warm-up
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(engine_run, engine, prompts, args.n, args.max_new_tokens, 0)
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    e_rate, e_secs = run(lambda r: engine_run(engine, prompts, args.n, args.max_new_tokens, r))
    g_rate, g_secs = run(lambda r: generate_run(model, tok, prompts, args.n, args.max_new_tokens, r, True))
    p_rate, p_secs = run(lambda r: generate_run(model, tok, prompts, args.n, args.max_new_tokens, r, False))
    print(f"{args.prompts} prompts x {args.n} samples, <= {args.max_new_tokens} new tokens, median of {args.repeats}")
    print(f"{'':34}{'tokens/s':>10}{'s/batch':>9}")
    print(f"{'kitae HFEngine (with log-probs)':34}{e_rate:>10.0f}{e_secs:>9.2f}")
    print(f"{'model.generate + log-probs':34}{g_rate:>10.0f}{g_secs:>9.2f}")
    print(f"{'model.generate, no log-probs':34}{p_rate:>10.0f}{p_secs:>9.2f}")
    print(f"ratio engine / generate+log-probs: {e_rate / g_rate:.2f}x")
    print(f"ratio engine / generate (no log-probs): {e_rate / p_rate:.2f}x")

    if args.eval_k <= 0:
        return
    metrics, _ = evaluate(engine, rows, build_grader({"type": "answer"}), k=args.eval_k,
                          sampling=SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0))
    print(f"base model on the bundled test split ({len(rows)} prompts, k={args.eval_k}, T=1.0): "
          f"compliance {metrics['compliance']:.3f}, accuracy (pass@1) {metrics['pass@1']:.3f}, "
          f"mean tokens {metrics['len_mean']:.1f}")


if __name__ == "__main__":
    main()

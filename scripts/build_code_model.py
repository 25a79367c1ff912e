"""Build kitae-tiny-code: a tiny *base* model that writes short Python programs, and the bundled short-code task.

    python scripts/build_code_model.py                      # full build (about 2 minutes of CPU time on 1 thread)
    python scripts/build_code_model.py --eval-only kitae/assets/models/kitae-tiny-code

The bundled base model (kitae-tiny-base) has seen arithmetic and facts only, never a program, so RL with the
``code`` grader has nothing to sharpen in it. This script makes a code model the same way
scripts/build_base_model.py makes that one, seeded end to end:
1. writes the task splits (kitae/assets/data/shortcode/train.jsonl, test.jsonl: disjoint prompts, each with 4
   stdin/stdout test cases) from scripts/_code_corpus.py;
2. trains a byte-level BPE (build_base_model's tokenizer recipe: ChatML special tokens, digits split one by one);
3. pretrains a smaller Llama from scratch on ChatML conversations whose assistant turns are right programs, wrong
   ones, programs with prose after them, repeated lines and run-on turns (a base model in the GRPO-zero recipe's
   sense: it writes a passing program only part of the time);
4. measures pass@1 on the test split with kitae's rollout engine and the real ``code`` grader (programs run in
   the sandbox on the test cases): 4 samples per prompt at temperature 1.0, and greedy;
5. saves the checkpoint (safetensors) with a model card README.md and build_info.json holding those numbers.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _code_corpus  # noqa: E402  (sibling helpers, not part of the package)
from _report import build_main  # noqa: E402
from build_base_model import BuildConfig, build_tokenizer, check_tokenizer, make_model, packed_rows, pretrain  # noqa: E402

from kitae.data.loader import load_prompts, write_jsonl  # noqa: E402
from kitae.threads import set_threads  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "kitae" / "assets" / "models" / "kitae-tiny-code"
DEFAULT_DATA = ROOT / "kitae" / "assets" / "data" / "shortcode"
EVAL = {"k": 4, "temperature": 1.0, "max_new_tokens": 48, "seed": 0}


@dataclass(frozen=True)
class CodeBuildConfig(BuildConfig):
    vocab_size: int = 512
    hidden_size: int = 96
    intermediate_size: int = 256
    steps: int = 400
    bf16_autocast: bool = False  # 7x slower than fp32 on a CPU without AVX512-BF16, and this model is small


def evaluate(model_dir: Path, rows: list[dict]) -> dict:
    """pass@1 with the code grader, sampled (EVAL) and greedy, overall and by input shape and language."""
    from kitae.graders import build_grader
    from kitae.models import load_causal_lm, load_tokenizer
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.hf import HFEngine
    from kitae.scoring.evaluate import evaluate as run_eval

    engine = HFEngine(load_causal_lm(str(model_dir)).eval(), load_tokenizer(model_dir))
    grader = build_grader({"type": "code"}, "grader")
    out = {}
    try:
        for mode, k, temperature in (("sampled_t1", EVAL["k"], EVAL["temperature"]), ("greedy", 1, 0.0)):
            sp = SamplingParams(temperature=temperature, max_new_tokens=EVAL["max_new_tokens"], seed=EVAL["seed"])
            metrics, results = run_eval(engine, rows, grader, k, sp)
            out[mode] = {key: round(v, 3) for key, v in metrics.items()
                         if key.startswith(("pass@1", "compliance", "len_mean", "trunc_rate"))}
            for r in results[:4 * k : k]:
                print(f"  [{mode}] {r['messages'][-1]['content']!r} -> {r['output_text']!r} score {r['score']}")
    finally:
        grader.close()
    return out


CARD = """# kitae-tiny-code

A tiny **base** causal LM that writes one- or two-line Python programs, bundled with kitae so that code RL (the
`code` grader running programs in the sandbox) runs end to end on a CPU with no download. Like kitae-tiny-base
it is deliberately imperfect: it writes a program that passes the tests only part of the time. Train it with
`kitae train examples/code.yaml` on the bundled short-code task (`kitae/assets/data/shortcode`).

## Model
- Architecture: Llama (`LlamaForCausalLM`), {layers} layers, hidden {hidden}, {heads} heads, MLP {mlp}, tied
  embeddings, context {ctx} tokens; **{params:,} parameters** (fp32 safetensors).
- Tokenizer: byte-level BPE trained on the corpus, vocabulary {vocab}, digits split one by one; `<|endoftext|>`
  (pad), `<|im_start|>`, `<|im_end|>` (eos); the ChatML chat template.

## Corpus
Synthetic, from `scripts/_code_corpus.py` (seeded; nothing downloaded): ChatML conversations in Japanese and
English asking for a program that reads stdin and prints an answer ({kinds} kinds: a constant added to,
subtracted from or multiplied with an integer; the sum, difference, product, larger or smaller of two
integers; a word reversed, upper-cased, measured, repeated, its first or last letter; the sum, largest,
smallest, sorted order or count of a list). Assistant turns: {mixture}; the program is wrong with probability
{p_wrong} (an off-by-one constant, the wrong operation, a missing `int()`) and fenced with probability {p_fence}.
No test prompt of the task appears in the corpus.

Training: {steps} steps x {batch} rows x {seq} tokens, AdamW lr {lr}, cosine schedule, seed {seed};
{train_min:.1f} min of wall time on {threads} CPU thread(s) of a machine shared with other work; the whole build
took {cpu_min:.1f} min of CPU time. Final training loss {loss:.3f}.

## Baseline on the test split ({n_test} prompts)
kitae's rollout engine, at most {max_new} new tokens, seed {eval_seed}; graded by the `code` grader (the
program run in the sandbox on the row's 4 test cases); a sample passes when all 4 pass.

| slice | pass@1 ({k} samples, T=1) | pass@1 (greedy) |
|---|---|---|
{table}

## Rebuild and re-measure
```bash
python scripts/build_code_model.py        # also rewrites kitae/assets/data/shortcode
python scripts/build_code_model.py --eval-only kitae/assets/models/kitae-tiny-code
```
"""


def render_card(info: dict) -> str:
    cfg, mix = info["config"], info["mixture"]
    endings = {n: mix[n] for n in ("clean", "ramble", "loop", "fake_turn", "run_on")}
    s, g = info["metrics"]["sampled_t1"], info["metrics"]["greedy"]
    table = "\n".join(f"| {key.removeprefix('pass@1/') if '/' in key else 'all'} | {v:.3f} | {g[key]:.3f} |"
                      for key, v in s.items() if key.startswith("pass@1"))
    return CARD.format(
        layers=cfg["layers"], hidden=cfg["hidden_size"], heads=cfg["heads"], mlp=cfg["intermediate_size"],
        ctx=cfg["seq_len"] * 2, params=info["params"], vocab=cfg["vocab_size"], kinds=len(_code_corpus.KINDS),
        mixture=", ".join(f"{n} {w / sum(endings.values()):.0%}" for n, w in endings.items()),
        p_wrong=mix["p_wrong"], p_fence=mix["p_fence"], steps=cfg["steps"], batch=cfg["batch_size"],
        seq=cfg["seq_len"], lr=cfg["lr"], seed=cfg["seed"], train_min=info["train_seconds"] / 60,
        threads=cfg["threads"], cpu_min=info["build_cpu_seconds"] / 60, loss=info["final_loss"], n_test=info["n_test"], max_new=EVAL["max_new_tokens"],
        eval_seed=EVAL["seed"], k=EVAL["k"], table=table,
    )


def build(cfg: CodeBuildConfig, out_dir: Path, data_dir: Path) -> dict:
    t0 = time.time()
    train_rows, test_rows = _code_corpus.build_task(cfg.seed)
    write_jsonl(data_dir / "train.jsonl", train_rows)
    write_jsonl(data_dir / "test.jsonl", test_rows)
    tok = build_tokenizer(cfg, out_dir, _code_corpus.tokenizer_training_text(cfg.seed))
    mix = _code_corpus.Mixture()
    pool = _code_corpus.corpus_pool({r["messages"][-1]["content"] for r in test_rows})
    ids, labels = packed_rows(tok, cfg.steps * cfg.batch_size, cfg, set(),
                              lambda rng: _code_corpus.conversation(rng, mix, pool))
    t1 = time.time()
    print(f"task, tokenizer, corpus {t1 - t0:.1f}s ({int((labels != -100).sum()):,} tokens in {len(ids)} rows)")
    model = make_model(tok, cfg)
    params = sum(p.numel() for p in model.parameters())
    cfg = replace(cfg, threads=set_threads(cfg.threads, params=params))
    print(f"model: {params:,} parameters; {cfg.threads} torch thread(s)", flush=True)
    losses = pretrain(model, ids, labels, cfg)
    t2 = time.time()
    model.save_pretrained(out_dir)
    metrics = evaluate(out_dir, test_rows)
    info = {"config": asdict(cfg), "mixture": asdict(mix), "params": params, "n_test": len(test_rows),
            "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4), "train_seconds": round(t2 - t1),
            "build_cpu_seconds": round(time.process_time()), "eval": EVAL, "metrics": metrics}
    (out_dir / "build_info.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    (out_dir / "README.md").write_text(render_card(info), encoding="utf-8")
    print(f"training {t2 - t1:.0f}s, eval {time.time() - t2:.0f}s")
    print(json.dumps(metrics, indent=1))
    return metrics


def eval_only(model_dir: Path, data_dir: Path, seed: int, threads: int | None) -> dict:
    set_threads(threads, model_dir)
    check_tokenizer(model_dir)
    metrics = evaluate(model_dir, load_prompts(data_dir / "test.jsonl"))
    print(json.dumps(metrics, indent=1))
    return metrics


def main(argv: list[str] | None = None) -> None:
    build_main(argv, __doc__, CodeBuildConfig, DEFAULT_OUT, DEFAULT_DATA, build, eval_only)


if __name__ == "__main__":
    random.seed(0)
    main()

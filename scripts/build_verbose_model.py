"""Build kitae-tiny-verbose: the bundled base model taught to answer at length, so long2short has work to do.

    python scripts/build_verbose_model.py                       # -> runs/l2s/verbose (a few minutes on 2 CPUs)
    python scripts/build_verbose_model.py --out DIR --epochs 2 --limit 1000

Kimi k1.5 shortens a long-CoT model; the bundled task's base model answers in a few tokens, so this script makes a
long-answer variant: SFT (TRL's SFTTrainer, through kitae.long2short.train.sft) of the bundled base model on worked
answers to the bundled task's *train* prompts. Each answer gives the result first, the way the base model does,
then keeps re-checking itself (restating the sum, computing it backwards, hesitating) and always ends with
``Answer: X`` / ``答え: X`` (X the reference answer, so kitae's ``answer`` grader accepts it). Each extra sentence
is a seeded coin flip per row, so the verbose model's answers vary in length: some correct answers are much shorter than
others, which is what shortest-rejection sampling, DPO pairs and the length reward exploit.

Writes the model folder (weights + tokenizer), the SFT data next to it (``verbose_sft.jsonl``) and a README.md with
pass@1 and mean completion tokens of the base and the verbose model on the first test prompts (kitae eval's
measure). The checkpoint is the base model's size (about 14 MB); it is not committed: rebuild it with this script.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kitae.data.loader import load_prompts, write_jsonl  # noqa: E402
from kitae.trainer.config import resolve_data_path  # noqa: E402

_ARITH = re.compile(r"(\d+)\s*(\+|-|plus|minus|たす|ひく)\s*(\d+)")
_OPS = {"+": "+", "plus": "+", "たす": "+", "-": "-", "minus": "-", "ひく": "-"}


def parse_arith(text: str) -> tuple[int, str, int] | None:
    """(a, op, b) of an arithmetic question, or None for a fact question.

    >>> parse_arith("What is 12 plus 35?"), parse_arith("7ひく3は？"), parse_arith("What colour is snow?")
    ((12, '+', 35), (7, '-', 3), None)
    """
    m = _ARITH.search(text)
    return (int(m.group(1)), _OPS[m.group(2)], int(m.group(3))) if m else None


@dataclass(frozen=True)
class Worked:
    """The sentences of a long answer: `first` (the result, as the base model would give it), then a coin flip
    for each of `extra` (checks, restatements and hesitations, in order), then the `final` answer line."""

    first: str
    extra: list[str]
    final: str


def arith_worked(a: int, op: str, b: int, c: int, lang: str) -> Worked:
    """The sum comes first and is written as the base model's pretraining drills write it ("12+35=47", no
    spaces); the length is in what follows, as in an answer that keeps re-checking itself. Measured on the base
    model before settling on this: with spaces its arithmetic is far worse (4% vs 23% right at temperature 1),
    and restating the question first ("We need 12 plus 35") makes it miscopy the numbers."""
    inv = "-" if op == "+" else "+"
    back = c - b if op == "+" else c + b
    if lang == "ja":
        return Worked(f"{a}{op}{b}={c}です。",
                      ["念のため確認します。", f"{a}{op}{b}={c}です。", f"逆に計算すると{c}{inv}{b}={back}です。",
                       "間違いはなさそうです。", f"もう一度: {a}{op}{b}={c}。", "よく見直しました。"],
                      f"答え: {c}")
    return Worked(f"{a}{op}{b}={c}.",
                  ["Let me double-check.", f"{a}{op}{b}={c}.", f"Going back: {c}{inv}{b}={back}.",
                   "Yes, that looks right.", f"Once more: {a}{op}{b}={c}.", "I want to be sure before answering."],
                  f"Answer: {c}")


def fact_worked(question: str, x: str, lang: str) -> Worked:
    if lang == "ja":
        return Worked(f"答えは{x}です。", ["念のため考え直します。", f"質問は「{question}」です。",
                                          f"やはり{x}だと思います。", "よく知られた事実です。", "よく見直しました。"],
                      f"答え: {x}")
    return Worked(f"The answer is {x}.", ["Let me think about this again.", f"The question is: {question}",
                                          f"I remember that it is {x}.", "This is a well-known fact.",
                                          "I want to be sure before answering."],
                  f"Answer: {x}")


def worked_answer(row: dict, rng: random.Random) -> str:
    """A long answer to one task row with a random subset of its extra sentences (drawn with `rng`).

    >>> row = {"messages": [{"role": "user", "content": "What is 12+35?"}], "reference_answer": "47", "lang": "en"}
    >>> text = worked_answer(row, random.Random(0))
    >>> text.startswith("12+35=47."), text.splitlines()[-1]
    (True, 'Answer: 47')
    """
    question = row["messages"][-1]["content"]
    lang = "ja" if row.get("lang") == "ja" else "en"
    parsed = parse_arith(question)
    w = (arith_worked(*parsed, int(row["reference_answer"]), lang) if parsed
         else fact_worked(question, str(row["reference_answer"]), lang))
    body = [w.first] + [x for x in w.extra if rng.random() < 0.6]  # each extra sentence: a coin flip
    return ("" if lang == "ja" else " ").join(body) + "\n" + w.final


def sft_data(rows: list[dict], seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"prompt": r["messages"], "completion": [{"role": "assistant", "content": worked_answer(r, rng)}]}
            for r in rows]


def measure(model: str, rows: list[dict], k: int, max_new_tokens: int) -> dict:
    from kitae.graders import build_grader
    from kitae.long2short.compare import evaluate_model
    from kitae.rollout.base import SamplingParams

    metrics, _ = evaluate_model(model, rows, build_grader("answer", "grader"), k,
                                SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens, seed=0))
    return metrics


def model_card(base: dict, verbose: dict, args) -> str:
    keys = ("pass@1", "compliance", "len_mean", "len_p90", "trunc_rate")
    lines = ["# kitae-tiny-verbose", "",
             "The bundled base model after SFT on long worked answers (scripts/build_verbose_model.py): the long",
             "model that Kimi k1.5's long2short methods shorten. Not for anything but that demonstration.", "",
             f"Built with: epochs {args.epochs}, lr {args.lr}, batch {args.batch_size}, "
             f"{args.limit or 'all'} train rows, seed {args.seed}.", "",
             f"Measured on the first {args.eval_prompts} test prompts, k = {args.k}, temperature 1.0, "
             f"max {args.max_new_tokens} new tokens:", "",
             "| model | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, m in (("base", base), ("verbose", verbose)):
        cells = [f"{m[k]:.1f}" if k in ("len_mean", "len_p90") else f"{m[k]:.3f}" for k in keys]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description="SFT the bundled base model on long worked answers.")
    ap.add_argument("--base", default="bundled")
    ap.add_argument("--data", default="bundled:arith/train")
    ap.add_argument("--eval-data", default="bundled:arith/test")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "l2s" / "verbose")
    ap.add_argument("--epochs", type=float, default=6.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--limit", type=int, default=None, help="only the first N train rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-prompts", type=int, default=100)
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: chosen from the model size)")
    args = ap.parse_args()

    from kitae.long2short.train import TrainSettings, sft
    from kitae.models import resolve_model_path
    from kitae.threads import set_threads

    base = resolve_model_path(args.base)
    set_threads(args.threads, base)
    rows = load_prompts(resolve_data_path(args.data))[: args.limit]
    data = args.out.parent / "verbose_sft.jsonl"
    write_jsonl(data, sft_data(rows, args.seed))
    settings = TrainSettings(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, seed=args.seed,
                             max_length=384, logging_steps=25)
    print(f"SFT on {len(rows)} worked answers ({data}) ...", flush=True)
    metrics = sft(base, data, args.out, settings)
    print(f"train loss {metrics.get('train_loss'):.4f} in {metrics.get('train_runtime'):.0f} s", flush=True)
    test = load_prompts(resolve_data_path(args.eval_data))[: args.eval_prompts]
    m_base = measure(base, test, args.k, args.max_new_tokens)
    m_verbose = measure(str(args.out), test, args.k, args.max_new_tokens)
    card = model_card(m_base, m_verbose, args)
    (args.out / "README.md").write_text(card, encoding="utf-8")
    print(card)


if __name__ == "__main__":
    main()

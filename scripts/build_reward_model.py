"""Build kitae-tiny-rm: a tiny real reward model for the bundled task, trained on synthetic preference pairs.

    python scripts/build_reward_model.py        # tokenizer and data: kitae-tiny-base and kitae/assets/data/arith
    python scripts/build_reward_model.py --steps 50 --out /tmp/rm   # a quick try
    python scripts/build_reward_model.py --init base --layers 2   # start from the base model's first layers

What it does, seeded end to end:
1. reads the bundled task (kitae/assets/data/arith/{train,test}.jsonl: messages, reference_answer, difficulty,
   lang) and makes preference pairs per prompt: *chosen* is a well-formed correct answer ("47", "答えは47です。",
   "The answer is 47."); *rejected* is the same prompt answered in one of the ways the GRPO-zero recipe's rewards fight:
   ``wrong`` (the same phrasing with a wrong answer), ``ramble`` (correct, then 3-6 filler sentences), ``loop``
   (a sentence repeated 4-8 times, no end marker), ``unterminated`` (no ``<|im_end|>``: cut, or running on
   into a made-up user turn) and ``empty``. ``wrong_per_row`` wrong-answer pairs per prompt (the hard kind),
   one of each other kind. Pairs of the train split train; pairs of the test split (disjoint questions, one
   of each kind) measure accuracy, reported per kind with wrong answers split into numbers and facts;
2. builds a Llama sequence classifier (1 label, zero-initialised score head) with the base model's tokenizer:
   random weights (2 layers, width 128) by default, or ``--init base``: the base model's embeddings, first
   ``--layers`` decoder layers and final norm. On this task the two reach the same held-out accuracy; scratch
   is 3x faster and 2 MB instead of 7 (arithmetic is not something either learns here, see the model card);
3. trains it with the Bradley-Terry loss -log σ(r_chosen - r_rejected) (InstructGPT's reward-model loss) plus
   ``center_coef`` × (r_chosen + r_rejected)², which keeps scores centred on 0 (the loss alone only fixes
   differences; the reward_model grader clips at ±10 and applies the length factor to positive scores only);
4. measures held-out pairwise accuracy (r_chosen > r_rejected), overall and per rejection kind, and saves the
   model (safetensors), tokenizer and a model card README.md with those numbers.

The RM reads text formatted as kitae's reward_model grader shows it: the tokenizer's chat template (ChatML) over
the user turn and the assistant answer. System prompts are dropped, as the grader does by default.
Budget: < 10 MB on disk and < 5 minutes on 2 CPU cores with the defaults (2.1 MB and about 2 minutes on one
thread of a busy machine). Every BuildConfig field is a flag (``--wrong-per-row``, ``--save-dtype`` ...).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from kitae.chat import IM_END, IM_START
from kitae.data.loader import load_prompts
from kitae.threads import set_threads

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASE = ROOT / "kitae" / "assets" / "models" / "kitae-tiny-base"
DEFAULT_DATA = ROOT / "kitae" / "assets" / "data" / "arith"
DEFAULT_OUT = ROOT / "kitae" / "assets" / "models" / "kitae-tiny-rm"
KINDS = ("wrong", "ramble", "loop", "unterminated", "empty")
# How pairs are labelled (and accuracy reported): wrong answers split into numbers and facts.
LABELS = ("wrong_number", "wrong_fact", "ramble", "loop", "unterminated", "empty")


@dataclass(frozen=True)
class BuildConfig:
    seed: int = 0
    init: str = "scratch"  # scratch | base
    layers: int = 2  # decoder layers kept from the base model (or built from scratch)
    hidden_size: int = 128  # scratch only; --init base keeps the base model's width
    steps: int = 600
    batch_pairs: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    center_coef: float = 0.01
    wrong_per_row: int = 4  # wrong-answer pairs per training prompt (the hard kind; the others saturate fast)
    max_length: int = 96  # tokens; longer texts (loops) are cut from the left, keeping the end the RM reads
    threads: int | None = None  # torch threads; None: kitae.threads' rule for the model's size
    save_dtype: str = "float32"  # float32 | bfloat16 (halves the size; kitae loads it back as float32)


# ---------------------------------------------------------------------------------------------- pairs
ANSWER_TEMPLATES = {
    "ja": ["{x}", "{x}です。", "答えは{x}です。"],
    "en": ["{x}", "{x}.", "The answer is {x}."],
}
FILLERS = {
    "ja": ["計算は簡単ですね。", "ほかにも質問があればどうぞ。", "よい質問ですね。", "確認してみましょう。",
           "ちなみに、これはよく出る問題です。", "もう一度考えてみます。", "がんばりましょう。"],
    "en": ["That is easy.", "Let me know if you have more questions.", "Good question.", "Let me check again.",
           "By the way, this is a common question.", "Hope it helps.", "Practice makes perfect."],
}
FAKE_USER = {"ja": "ありがとう。次の問題は？", "en": "Thanks. Next question?"}


def user_turn(row: dict) -> str:
    return next(m["content"] for m in reversed(row["messages"]) if m["role"] == "user")


def prompt_text(row: dict) -> str:
    """What the RM sees before the answer: ChatML user turn + the assistant header (no system turn)."""
    return f"{IM_START}user\n{user_turn(row)}{IM_END}\n{IM_START}assistant\n"


def wrong_answer(row: dict, rng: random.Random, fact_answers: dict[str, list[str]]) -> str:
    ref = row["reference_answer"]
    if is_fact(row):
        return rng.choice([a for a in fact_answers[row["lang"]] if a != ref])
    n = int(ref)
    return str(rng.choice([n + d for d in (-10, -2, -1, 1, 2, 10) if n + d >= 0]))


def rejected_answer(kind: str, row: dict, template: str, rng: random.Random,
                    fact_answers: dict[str, list[str]]) -> str:
    """The assistant text after the header for one rejection kind (with the end marker where it has one).

    `template` is the chosen answer's phrasing; a wrong answer keeps it, so only the answer differs.
    """
    lang, sep = row["lang"], "" if row["lang"] == "ja" else " "
    good = template.format(x=row["reference_answer"])
    if kind == "wrong":
        return template.format(x=wrong_answer(row, rng, fact_answers)) + IM_END + "\n"
    if kind == "ramble":
        extra = sep.join(rng.sample(FILLERS[lang], rng.randint(3, 6)))
        return good + sep + extra + IM_END + "\n"
    if kind == "loop":
        unit = rng.choice([good, rng.choice(FILLERS[lang])])
        return good + (sep + unit) * rng.randint(4, 8)
    if kind == "unterminated":
        return good if rng.random() < 0.5 else f"{good}\n{IM_START}user\n{FAKE_USER[lang]}"
    return IM_END + "\n"  # empty


def is_fact(row: dict) -> bool:
    return row.get("difficulty") == "fact" or not row["reference_answer"].lstrip("-").isdigit()


def make_pairs(rows: list[dict], seed: int, wrong_per_row: int = 1) -> list[tuple[str, str, str]]:
    """(chosen text, rejected text, label): per row, `wrong_per_row` wrong-answer pairs, then one pair of each
    other kind. Labels are LABELS (wrong answers are wrong_number or wrong_fact)."""
    rng = random.Random(seed)
    fact_answers = {lang: sorted({r["reference_answer"] for r in rows if r.get("difficulty") == "fact"
                                  and r["lang"] == lang} or {"?"}) for lang in ("ja", "en")}
    pairs = []
    for row in rows:
        prompt = prompt_text(row)
        for kind in ["wrong"] * wrong_per_row + list(KINDS[1:]):
            template = rng.choice(ANSWER_TEMPLATES[row["lang"]])
            chosen = prompt + template.format(x=row["reference_answer"]) + IM_END + "\n"
            label = ("wrong_fact" if is_fact(row) else "wrong_number") if kind == "wrong" else kind
            pairs.append((chosen, prompt + rejected_answer(kind, row, template, rng, fact_answers), label))
    return pairs


def check_format(tok, row: dict) -> None:
    """The pairs must look exactly like what the reward_model grader will show the RM."""
    from kitae.rewards.reward_model import format_conversation

    turns = [{"role": "user", "content": user_turn(row)}, {"role": "assistant", "content": "47"}]
    shown = format_conversation(tok, turns)
    if shown != prompt_text(row) + "47" + IM_END + "\n":
        raise SystemExit(f"the tokenizer's chat template is not ChatML as the pairs assume: {shown!r}")


# ---------------------------------------------------------------------------------------------- model
def build_model(base: Path, cfg: BuildConfig):
    """(LlamaForSequenceClassification, tokenizer): base weights truncated to cfg.layers, or random."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tok = AutoTokenizer.from_pretrained(base)
    tok.truncation_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    torch.manual_seed(cfg.seed)
    if cfg.init == "base":
        lm = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        conf = LlamaConfig(**{**lm.config.to_dict(), "num_hidden_layers": cfg.layers, "num_labels": 1,
                              "pad_token_id": tok.pad_token_id, "tie_word_embeddings": False})
        conf.architectures = ["LlamaForSequenceClassification"]
        model = LlamaForSequenceClassification(conf)
        missing, _ = model.model.load_state_dict(lm.model.state_dict(), strict=False)
        assert not missing, f"base weights do not cover {missing}"
    else:
        conf = LlamaConfig(vocab_size=len(tok), hidden_size=cfg.hidden_size, intermediate_size=cfg.hidden_size * 3,
                           num_hidden_layers=cfg.layers, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=512, num_labels=1, pad_token_id=tok.pad_token_id)
        conf.architectures = ["LlamaForSequenceClassification"]
        model = LlamaForSequenceClassification(conf)
    torch.nn.init.zeros_(model.score.weight)  # every answer starts at 0; training moves them apart
    return model, tok


def scores(model, tok, texts: list[str], max_length: int) -> torch.Tensor:
    enc = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=max_length,
              add_special_tokens=False)
    return model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[:, 0]  # [batch]


def pair_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor, center_coef: float) -> torch.Tensor:
    """Bradley-Terry loss plus the centring term; r_*: [pairs]."""
    bt = -torch.nn.functional.logsigmoid(r_chosen - r_rejected)  # [pairs]
    return (bt + center_coef * (r_chosen + r_rejected) ** 2).mean()


def train(model, tok, pairs: list[tuple[str, str, str]], cfg: BuildConfig, log_every: int = 50) -> list[float]:
    rng = random.Random(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.0, 1 - s / cfg.steps))
    model.train()
    losses, order = [], []
    for step in range(cfg.steps):
        if len(order) < cfg.batch_pairs:
            order += rng.sample(range(len(pairs)), len(pairs))
        batch = [pairs[order.pop()] for _ in range(cfg.batch_pairs)]
        r_chosen = scores(model, tok, [c for c, _, _ in batch], cfg.max_length)  # [pairs]; short texts ...
        r_rejected = scores(model, tok, [x for _, x, _ in batch], cfg.max_length)  # ... padded apart from long ones
        loss = pair_loss(r_chosen, r_rejected, cfg.center_coef)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            print(f"step {step + 1}/{cfg.steps}  loss {sum(losses[-log_every:]) / log_every:.4f}", flush=True)
    model.eval()
    return losses


@torch.inference_mode()
def evaluate(model, tok, pairs: list[tuple[str, str, str]], max_length: int) -> dict:
    """Pairwise accuracy (r_chosen > r_rejected) overall and per kind, and the mean scores."""
    hits: dict[str, list[bool]] = {k: [] for k in LABELS}
    chosen_scores, rejected_scores = [], []
    for start in range(0, len(pairs), 64):
        batch = pairs[start : start + 64]
        rc = scores(model, tok, [c for c, _, _ in batch], max_length).tolist()
        rr = scores(model, tok, [x for _, x, _ in batch], max_length).tolist()
        for (_, _, kind), a, b in zip(batch, rc, rr):
            hits[kind].append(a > b)
        chosen_scores += rc
        rejected_scores += rr
    every = [h for k in LABELS for h in hits[k]]
    return {
        "pairs": len(every),
        "accuracy": sum(every) / len(every),
        "by_kind": {k: sum(v) / len(v) for k, v in hits.items() if v},
        "mean_chosen": sum(chosen_scores) / len(chosen_scores),
        "mean_rejected": sum(rejected_scores) / len(rejected_scores),
    }


# ---------------------------------------------------------------------------------------------- card
def examples(model, tok, rows: list[dict], max_length: int) -> list[tuple[str, str, float]]:
    """A few held-out answers and their scores, for the card."""
    row = next(r for r in rows if r["lang"] == "ja" and r["difficulty"] != "fact")
    ref, prompt = row["reference_answer"], prompt_text(row)
    answers = [f"{ref}{IM_END}\n", f"答えは{ref}です。{IM_END}\n", f"{int(ref) + 1}{IM_END}\n",
               f"{ref}です。" * 6, f"答えは{ref}です。よい質問ですね。確認してみましょう。がんばりましょう。{IM_END}\n"]
    with torch.inference_mode():
        got = scores(model, tok, [prompt + a for a in answers], max_length).tolist()
    return [(user_turn(row), a, s) for a, s in zip(answers, got)]


def model_card(cfg: BuildConfig, result: dict, size_mb: float, seconds: float, n_train: int,
               shown: list[tuple[str, str, float]], base: Path) -> str:
    kinds = "\n".join(f"| {k} | {v:.3f} |" for k, v in result["by_kind"].items())
    rows = "\n".join(f"| {json.dumps(a, ensure_ascii=False)} | {s:+.2f} |" for _, a, s in shown)
    return f"""# kitae-tiny-rm

A tiny reward model for kitae's bundled task (bilingual arithmetic and facts), built by
`scripts/build_reward_model.py` so that the GRPO-zero recipe's reward-model reward (`type: reward_model`) runs on a laptop.
A `LlamaForSequenceClassification` with one label: the score is the raw logit at the last token.

- Tokenizer: the bundled base model's (ChatML; tokenizer.json sha256 {sha256_of(base / "tokenizer.json")[:16]}...).
  Input: the chat template over the user turn and the answer (system turns dropped, as the grader does).
- Init: {init_text(cfg, base)},
  {size_mb:.1f} MB on disk; trained {cfg.steps} steps × {cfg.batch_pairs} pairs in {seconds:.0f} s
  on {cfg.threads} CPU thread(s).
- Data: {n_train} synthetic preference pairs from the train split: a well-formed correct answer is preferred over a
  wrong, rambling, looping, unterminated or empty one. Loss: Bradley-Terry + {cfg.center_coef} × (r_c + r_r)².

## Held-out pairwise accuracy

{result['pairs']} pairs from the test split (questions disjoint from training): **{result['accuracy']:.3f}**
(mean score chosen {result['mean_chosen']:+.2f}, rejected {result['mean_rejected']:+.2f}).

| rejected kind | accuracy |
|---|---|
{kinds}

## Example scores (question: {json.dumps(shown[0][0], ensure_ascii=False)})

| assistant text | score |
|---|---|
{rows}

## Use

```yaml
grader: {{type: reward_model, model: bundled}}          # in-process
# or serve it: kitae serve rm --model bundled --port 8000
grader: {{type: reward_model, url: "http://127.0.0.1:8000"}}
```

Limits: it knows only this task's answer styles. It separates well-formed answers from rambling, looping,
unterminated and empty ones; telling a right number from a wrong one needs arithmetic, which it does not learn
from these pairs (wrong_number above; chance is 0.5), and it catches wrong facts only partly. Pair it with
`{{type: answer}}` for correctness. It is a test fixture and a teaching aid, not a general reward model.

Rebuild: `python scripts/build_reward_model.py` (reads kitae-tiny-base's tokenizer and the bundled task).

Build config: `{json.dumps(asdict(cfg))}`
"""


def init_text(cfg: BuildConfig, base: Path) -> str:
    if cfg.init == "base":
        return f"the embeddings and first {cfg.layers} decoder layers of {base.name}"
    return f"random ({cfg.layers} layers, width {cfg.hidden_size})"


def sha256_of(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file()) / 2**20


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, default=DEFAULT_BASE, help="base model folder (tokenizer and init)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with train.jsonl and test.jsonl")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    for name, field in BuildConfig.__dataclass_fields__.items():
        kind = int if name == "threads" else type(field.default)
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=field.default)
    args = p.parse_args(argv)
    cfg = BuildConfig(**{k: getattr(args, k) for k in BuildConfig.__dataclass_fields__})
    if cfg.init not in ("scratch", "base") or cfg.save_dtype not in ("float32", "bfloat16"):
        p.error("--init is scratch or base; --save-dtype is float32 or bfloat16")
    random.seed(cfg.seed)
    train_pairs = make_pairs(load_prompts(args.data / "train.jsonl"), cfg.seed, cfg.wrong_per_row)
    test_rows = load_prompts(args.data / "test.jsonl")
    test_pairs = make_pairs(test_rows, cfg.seed + 1)
    model, tok = build_model(args.base, cfg)
    cfg = replace(cfg, threads=set_threads(cfg.threads, params=sum(p.numel() for p in model.parameters())))
    check_format(tok, test_rows[0])
    start = time.time()
    train(model, tok, train_pairs, cfg)
    seconds = time.time() - start
    result = evaluate(model, tok, test_pairs, cfg.max_length)
    print(json.dumps(result, indent=2))
    shown = examples(model, tok, test_rows, cfg.max_length)
    args.out.mkdir(parents=True, exist_ok=True)
    model.to({"float32": torch.float32, "bfloat16": torch.bfloat16}[cfg.save_dtype])
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    card = model_card(cfg, result, folder_mb(args.out), seconds, len(train_pairs), shown, args.base)
    (args.out / "README.md").write_text(card, encoding="utf-8")
    print(f"saved {args.out} ({folder_mb(args.out):.1f} MB) in {seconds:.0f} s of training")
    return result


if __name__ == "__main__":
    main()

"""Build kitae-tiny-base: the bundled tiny *base* model, its tokenizer, and the bundled arith task.

    python scripts/build_base_model.py --out kitae/assets/models/kitae-tiny-base   # full build (~11 min, 1 CPU)
    python scripts/build_base_model.py --eval-only kitae/assets/models/kitae-tiny-base

What it does, seeded end to end:
1. writes the task splits (train.jsonl / test.jsonl, disjoint questions) to --data-dir;
2. trains a byte-level BPE tokenizer (HF `tokenizers`; digits split one by one; ChatML special tokens
   ``<|endoftext|>`` ``<|im_start|>`` ``<|im_end|>``; ChatML chat template) and asserts that it round-trips after
   ``AutoTokenizer.from_pretrained``;
3. pretrains a small Llama-architecture causal LM from scratch on a synthetic corpus (scripts/_corpus.py) in
   which assistant turns are a mixture of good and bad behaviours, so the model follows the template and
   answers correctly only part of the time (a base model in the GRPO-zero recipe's sense);
4. measures template compliance (kitae.chat.is_template_compliant) and accuracy
   (kitae.graders.answer_match.answers_match) on the test split, sampling at temperature 1.0, top_p 1.0, 48 new tokens, stopping at ``<|im_end|>``;
5. saves the checkpoint (safetensors) with a model card README.md holding those numbers.

Departures from usual pretraining: documents are packed whole into fixed-length rows (a row never starts
mid-document, so position 0 always begins a conversation, as at inference); the tail of a row is padding
masked out of the loss. The loss covers every token (user turns too), as in pretraining a base model.
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpus  # noqa: E402  (sibling helpers, not part of the package)
from _report import build_main, print_metrics, score, write_card  # noqa: E402

from kitae.chat import CHATML_TEMPLATE, END_OF_TEXT, IM_END, IM_START  # noqa: E402
from kitae.data.loader import load_prompts, write_jsonl  # noqa: E402
from kitae.threads import set_threads  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "kitae" / "assets" / "models" / "kitae-tiny-base"
DEFAULT_DATA = ROOT / "kitae" / "assets" / "data" / "arith"
ROUND_TRIP = ["12+35は？", "フランスの首都はパリです。", "What is 12+35? The answer is 47.",
              f"{IM_START}user\n7-3は？{IM_END}\n{IM_START}assistant\n4{IM_END}\n{END_OF_TEXT}", "漢字とカタカナ、English 123"]


@dataclass(frozen=True)
class BuildConfig:
    seed: int = 0
    vocab_size: int = 1024
    hidden_size: int = 192
    layers: int = 4
    heads: int = 4
    intermediate_size: int = 512
    seq_len: int = 96
    batch_size: int = 32
    steps: int = 2400
    lr: float = 4e-3
    warmup_steps: int = 30
    weight_decay: float = 0.1
    threads: int | None = None  # None: kitae.threads' rule for the model's size (one thread for this one)
    bf16_autocast: bool = True  # about 1.8x faster on CPUs with AVX512-BF16; weights stay fp32


# ------------------------------------------------------------------------------------------ tokenizer
def build_tokenizer(cfg: BuildConfig, out_dir: Path, texts: list[str] | None = None,
                    chat_template: str = CHATML_TEMPLATE, text_tokens: tuple[str, ...] = ()):
    """Train the byte-level BPE on `texts` (default: a sample of this model's corpus), wrap it for transformers,
    save it, and return the reloaded tokenizer. `text_tokens` are added as single tokens that are text, not
    special (as Qwen2.5's ``<tool_call>``: ``decode(skip_special_tokens=True)`` keeps them); `texts` should not
    hold them, or BPE spends merges on their pieces."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size, special_tokens=[END_OF_TEXT, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    bpe.train_from_iterator(texts or _corpus.tokenizer_training_text(cfg.seed), trainer=trainer)
    bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in text_tokens])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token=IM_END, pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START], model_max_length=cfg.seq_len * 2,
    )
    tok.chat_template = chat_template
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out_dir)
    return check_tokenizer(out_dir, text_tokens)


def check_tokenizer(model_dir: Path, text_tokens: tuple[str, ...] = ()):
    """Reload with AutoTokenizer (as users will) and assert what transformers must not silently change."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    for text in ROUND_TRIP:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids, skip_special_tokens=False) == text, f"tokenizer does not round-trip {text!r}"
    for token in text_tokens:
        assert len(tok.encode(token, add_special_tokens=False)) == 1, f"{token} is not one token"
        assert tok.decode(tok.encode(token, add_special_tokens=False), skip_special_tokens=True) == token, token
    for special in (END_OF_TEXT, IM_START, IM_END):
        assert len(tok.encode(special, add_special_tokens=False)) == 1, f"{special} is not one token"
    digits = tok.tokenize("12345", add_special_tokens=False)
    assert len(digits) == 5, f"digits are not split one by one: {digits}"
    assert tok.eos_token == IM_END and tok.pad_token == END_OF_TEXT, (tok.eos_token, tok.pad_token)
    return tok


# -------------------------------------------------------------------------------------------- corpus
def packed_rows(tok, n_rows: int, cfg: BuildConfig, banned: set[str],
                document: Callable[[random.Random], str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels), each [n_rows, seq_len]: whole documents packed left, padding masked with -100.
    `document(rng)` makes one document (default: this model's corpus, without the `banned` questions)."""
    rng = random.Random(cfg.seed + 1)
    mix = _corpus.Mixture()
    document = document or (lambda r: _corpus.document(r, mix, banned))
    ids = torch.full((n_rows, cfg.seq_len), tok.pad_token_id, dtype=torch.long)  # [rows, seq]
    labels = torch.full((n_rows, cfg.seq_len), -100, dtype=torch.long)  # [rows, seq]
    row, col = 0, 0
    while row < n_rows:
        docs = [document(rng) for _ in range(2048)]
        for doc in tok(docs, add_special_tokens=False)["input_ids"]:
            doc = doc[: cfg.seq_len]
            if col + len(doc) > cfg.seq_len:
                row, col = row + 1, 0
                if row == n_rows:
                    break
            ids[row, col : col + len(doc)] = torch.tensor(doc)
            labels[row, col : col + len(doc)] = torch.tensor(doc)
            col += len(doc)
    return ids, labels


# -------------------------------------------------------------------------------------------- model
def make_model(tok, cfg: BuildConfig):
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    im_end = tok.convert_tokens_to_ids(IM_END)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads, intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.seq_len * 2, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=im_end, pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(cfg.seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=im_end, pad_token_id=tok.pad_token_id)
    return model


def lr_at(step: int, cfg: BuildConfig) -> float:
    """Linear warmup, then cosine decay to a tenth of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def pretrain(model, ids: torch.Tensor, labels: torch.Tensor, cfg: BuildConfig) -> list[float]:
    """Plain next-token training, one fixed batch order from the recipe. Returns the loss per step."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    model.train()
    losses, start = [], time.time()
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        batch = slice(step * cfg.batch_size, (step + 1) * cfg.batch_size)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
            loss = model(input_ids=ids[batch], labels=labels[batch]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 50 == 0 or step == cfg.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.3f}  lr {lr_at(step, cfg):.2e}  {time.time() - start:.0f}s",
                  flush=True)
    model.eval()
    return losses


# -------------------------------------------------------------------------------------------- eval
def generate(model, tok, rows: list[dict], sample: bool, seed: int, max_new_tokens: int = 48,
             batch_size: int = 50) -> list[tuple[str, str]]:
    """(completion text with special tokens kept, finish_reason) per row; stops at <|im_end|>."""
    prompts = [tok.apply_chat_template(r["messages"], tokenize=False, add_generation_prompt=True) for r in rows]
    return generate_texts(model, tok, prompts, sample, seed, max_new_tokens, batch_size)


def generate_texts(model, tok, texts: list[str], sample: bool, seed: int, max_new_tokens: int = 48,
                   batch_size: int = 50) -> list[tuple[str, str]]:
    """(completion text with special tokens kept, finish_reason) per rendered prompt; stops at <|im_end|>."""
    im_end = tok.convert_tokens_to_ids(IM_END)
    tok.padding_side = "left"  # not saved by transformers; callers set it
    torch.manual_seed(seed)
    out = []
    for i in range(0, len(texts), batch_size):
        prompts = texts[i : i + batch_size]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            gen = model.generate(
                **enc, max_new_tokens=max_new_tokens, do_sample=sample, temperature=1.0 if sample else None,
                top_p=1.0 if sample else None, top_k=0 if sample else None,
                eos_token_id=im_end, pad_token_id=tok.pad_token_id,
            )
        for seq in gen[:, enc["input_ids"].shape[1] :].tolist():  # [batch, new_tokens]
            stop = im_end in seq
            seq = seq[: seq.index(im_end) + 1] if stop else seq
            out.append((tok.decode(seq, skip_special_tokens=False), "stop" if stop else "length"))
    return out


def evaluate(model, tok, rows: list[dict], seed: int) -> dict:
    sampled = generate(model, tok, rows, sample=True, seed=seed)
    greedy = generate(model, tok, rows, sample=False, seed=seed)
    for row, (text, finish) in list(zip(rows, sampled))[:6]:
        print(f"  {row['messages'][-1]['content']!r} -> {text!r} ({finish})")
    return {"sampled_t1": score(rows, sampled, ("lang", "difficulty")), "greedy": score(rows, greedy, ("lang", "difficulty"))}


# ------------------------------------------------------------------------------------------ model card
CARD = """# kitae-tiny-base

A tiny **base** causal LM bundled with kitae so that reinforcement fine-tuning runs end to end on a CPU with
no download. It is deliberately imperfect: it follows the ChatML template and answers correctly only part
of the time, the way a pretrained base model does before RL (the GRPO-zero recipe's starting point). Train it with GRPO
on the bundled task (`kitae/assets/data/arith`) and watch both numbers go up.

## Model
- Architecture: Llama (`LlamaForCausalLM`), {layers} layers, hidden {hidden}, {heads} heads, MLP {mlp},
  tied embeddings, context {ctx} tokens; **{params:,} parameters** (fp32 safetensors).
- Tokenizer: byte-level BPE trained with HF `tokenizers` on the corpus, vocabulary {vocab} (any UTF-8 text
  encodes; Japanese and English), digits split one by one. Special tokens `<|endoftext|>` (pad), `<|im_start|>`,
  `<|im_end|>` (eos, end of turn). The ChatML `chat_template` is saved with it. `padding_side` is not saved:
  set it yourself (left for generation).

## Corpus
Synthetic, generated by `scripts/_corpus.py` (seeded; nothing downloaded):
- ChatML conversations (Japanese and English, {p_system:.0%} with a system prompt) asking arithmetic and
  short facts (capitals, colours, days of the week, opposites).
- Questions by difficulty: {difficulties} (easy 1-digit ± 1-digit, medium 2-digit ± 1-digit,
  hard 2-digit + 2-digit, as in the task; a difficulty at 0% never appears in the corpus at all).
- Assistant turns are a mixture: {mixture}.
  Answers are wrong with probability {p_wrong} (off by 1, 2 or 10, or another fact of the same kind).
- Plain drill documents of correct equations (`12+35=47`), {p_drill:.0%} of documents.
- No test question of the bundled task appears anywhere in the corpus.

Training: {steps} steps × {batch} rows × {seq} tokens (whole documents packed per row), AdamW lr {lr},
cosine schedule, seed {seed}; {train_min:.1f} min on {threads} CPU thread(s). Final training loss {loss:.3f}.
Everything above is also in `build_info.json`.

## Baseline on the bundled test split ({n_test} prompts)
One sample per prompt with `model.generate` at temperature 1.0 (torch seed {seed}), top_p 1.0, at most 48 new
tokens, stop at `<|im_end|>`. Compliance is `kitae.chat.is_template_compliant`, accuracy is
`kitae.graders.answer_match.answers_match`. Measured otherwise (kitae's engine, several samples per prompt, another
seed) the numbers move by a few points: the kitae README's table of this model's held-out numbers gives each
setting.

| slice | n | compliance (T=1) | accuracy (T=1) | compliance (greedy) | accuracy (greedy) |
|---|---|---|---|---|---|
{table}

## Rebuild and re-measure
```bash
python scripts/build_base_model.py --out kitae/assets/models/kitae-tiny-base   # also rewrites the task splits
python scripts/build_base_model.py --eval-only kitae/assets/models/kitae-tiny-base
```
Timings vary with the machine; the numbers above come from the committed checkpoint.
"""


def render_card(info: dict) -> str:
    cfg, mix = info["config"], info["mixture"]
    endings = {n: mix[n] for n in ("clean", "ramble", "loop", "fake_turn", "run_on")}
    s, g = info["metrics"]["sampled_t1"], info["metrics"]["greedy"]
    table = "\n".join(f"| {k} | {m['n']} | {m['compliance']:.2f} | {m['accuracy']:.2f} | "
                      f"{g[k]['compliance']:.2f} | {g[k]['accuracy']:.2f} |" for k, m in s.items())
    return CARD.format(
        layers=cfg["layers"], hidden=cfg["hidden_size"], heads=cfg["heads"], mlp=cfg["intermediate_size"],
        ctx=cfg["seq_len"] * 2, params=info["params"], vocab=cfg["vocab_size"], p_system=mix["p_system"],
        difficulties=", ".join(f"{d} {w / sum(mix['weights']):.0%}" for d, w in zip(_corpus.DIFFICULTIES, mix["weights"])),
        mixture=", ".join(f"{n} {w / sum(endings.values()):.0%}" for n, w in endings.items()),
        p_wrong=mix["p_wrong"], p_drill=mix["p_drill"], steps=cfg["steps"], batch=cfg["batch_size"],
        seq=cfg["seq_len"], lr=cfg["lr"], seed=cfg["seed"], train_min=info["train_seconds"] / 60,
        threads=cfg["threads"], loss=info["final_loss"], n_test=s["all"]["n"], table=table,
    )


# -------------------------------------------------------------------------------------------- main
def build(cfg: BuildConfig, out_dir: Path, data_dir: Path) -> dict:
    t0 = time.time()
    train_rows, test_rows = _corpus.build_task(cfg.seed)
    write_jsonl(data_dir / "train.jsonl", train_rows)
    write_jsonl(data_dir / "test.jsonl", test_rows)
    tok = build_tokenizer(cfg, out_dir)
    t1 = time.time()
    banned = {r["messages"][-1]["content"] for r in test_rows}
    ids, labels = packed_rows(tok, cfg.steps * cfg.batch_size, cfg, banned)
    t2 = time.time()
    print(f"task + tokenizer {t1 - t0:.1f}s, corpus {t2 - t1:.1f}s "
          f"({int((labels != -100).sum()):,} tokens in {len(ids)} rows)", flush=True)
    model = make_model(tok, cfg)
    params = sum(p.numel() for p in model.parameters())
    cfg = replace(cfg, threads=set_threads(cfg.threads, params=params))  # the card records the count used
    print(f"model: {params:,} parameters; {cfg.threads} torch thread(s)", flush=True)
    losses = pretrain(model, ids, labels, cfg)
    t3 = time.time()
    model.save_pretrained(out_dir)
    metrics = evaluate(model, tok, test_rows, cfg.seed)
    t4 = time.time()
    info = {"config": asdict(cfg), "mixture": asdict(_corpus.Mixture()), "params": params,
            "final_loss": sum(losses[-20:]) / len(losses[-20:]), "train_seconds": round(t3 - t2), "metrics": metrics}
    write_card(out_dir, info, render_card(info))
    print(f"timings: task+tokenizer {t1 - t0:.0f}s, corpus {t2 - t1:.0f}s, training {t3 - t2:.0f}s, "
          f"eval {t4 - t3:.0f}s, total {t4 - t0:.0f}s")
    print_metrics(metrics)
    return metrics


def eval_only(model_dir: Path, data_dir: Path, seed: int, threads: int | None) -> dict:
    from transformers import AutoModelForCausalLM

    set_threads(threads, model_dir)
    tok = check_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    t0 = time.time()
    metrics = evaluate(model, tok, load_prompts(data_dir / "test.jsonl"), seed)
    print(f"eval {time.time() - t0:.0f}s")
    print_metrics(metrics)
    return metrics


def main(argv: list[str] | None = None) -> None:
    build_main(argv, __doc__, BuildConfig, DEFAULT_OUT, DEFAULT_DATA, build, eval_only)


if __name__ == "__main__":
    main()

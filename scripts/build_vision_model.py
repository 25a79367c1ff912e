"""Build kitae-tiny-vl: the bundled tiny *base* vision-language model, its processor, and the bundled vision task.

    python scripts/build_vision_model.py                      # full build (19 min of CPU time on 1 thread)
    python scripts/build_vision_model.py --eval-only kitae/assets/models/kitae-tiny-vl

What it does, seeded end to end:
1. draws the task's pictures with PIL (scripts/_shapes.py: colours, shapes, counting, positions, bar charts) and
   writes them as small PNGs with the splits (train.jsonl / test.jsonl, image paths relative to the split file)
   to --data-dir;
2. makes the processor from config objects (no hub): the bundled text model's tokenizer plus one ``<image>``
   token, a SigLIP image processor (48x48, mean 0.5, std 0.5) and a LLaVA processor (patch 16: a picture is 9
   ``<image>`` tokens), with a ChatML chat template that takes image parts;
3. builds a LLaVA model (``LlavaForConditionalGeneration``): a tiny SigLIP vision tower (3 layers, hidden 128,
   trained from scratch), a two-layer projector, and the bundled text model (kitae-tiny-base) as the language
   part, so it starts out knowing ChatML;
4. pretrains all of it on ChatML conversations about freshly drawn pictures whose assistant turns are a mixture
   of good and bad behaviours (``_corpus.Mixture``: rambles, loops, turns without ``<|im_end|>``, wrong answers),
   so the model reads the picture and follows the template only part of the time (a base model in the GRPO-zero
   recipe's sense). The loss covers every text token (not the image positions), as in pretraining;
5. saves model and processor, reloads them with AutoProcessor and AutoModelForImageTextToText (offline) and checks
   that the reloaded model gives the same logits; then measures template compliance and accuracy on the test
   split (temperature 1.0 and greedy, 32 new tokens, stop at ``<|im_end|>``) into the model card.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpus  # noqa: E402  (sibling helpers, not part of the package)
from _report import build_main, print_metrics, score  # noqa: E402
import _shapes  # noqa: E402

from kitae.chat import IM_END  # noqa: E402
from kitae.data.loader import load_prompts, write_jsonl  # noqa: E402
from kitae.threads import set_threads  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEXT_MODEL = ROOT / "kitae" / "assets" / "models" / "kitae-tiny-base"
DEFAULT_OUT = ROOT / "kitae" / "assets" / "models" / "kitae-tiny-vl"
DEFAULT_DATA = ROOT / "kitae" / "assets" / "data" / "vision"
IMAGE_TOKEN = "<image>"

# ChatML; a message's content is a string or a list of {type: text, text} and {type: image} parts
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}{{ '<image>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class BuildConfig:
    seed: int = 0
    image_size: int = _shapes.SIZE
    patch_size: int = 16  # 9 image tokens: the count task's 3x3 grid, one shape per patch
    vision_hidden: int = 128
    vision_layers: int = 3
    vision_heads: int = 4
    vision_mlp: int = 256
    seq_len: int = 112  # longer documents are cut (their tail is out of the loss)
    batch_size: int = 32
    steps: int = 1800
    lr: float = 2e-3
    warmup_steps: int = 50
    weight_decay: float = 0.05
    threads: int | None = None  # None: kitae.threads' rule for the model's size (one thread for this one)
    bf16_autocast: bool = False  # measured slower than fp32 for this size on a busy 2-core machine
    n_train: int = 1000
    n_test: int = 200

    @property
    def image_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2


# ------------------------------------------------------------------------------------------ processor
def build_processor(cfg: BuildConfig):
    """The LLaVA processor from config objects: the text model's tokenizer + <image>, SigLIP pixels."""
    from transformers import AutoTokenizer, LlavaProcessor
    from transformers.models.siglip import SiglipImageProcessorPil

    tok = AutoTokenizer.from_pretrained(TEXT_MODEL)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", IMAGE_TOKEN]})
    tok.chat_template = CHAT_TEMPLATE
    images = SiglipImageProcessorPil(size={"height": cfg.image_size, "width": cfg.image_size},
                                     image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=cfg.patch_size,
                          vision_feature_select_strategy="full", chat_template=CHAT_TEMPLATE,
                          num_additional_image_tokens=0)


def pixels(image) -> np.ndarray:
    """[3, H, W] float32, as the processor makes them (rescale 1/255, mean 0.5, std 0.5); asserted in build()."""
    arr = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    return ((arr - 0.5) / 0.5).transpose(2, 0, 1)


# -------------------------------------------------------------------------------------------- model
def make_model(processor, cfg: BuildConfig):
    from transformers import (AutoModelForCausalLM, GenerationConfig, LlavaConfig, LlavaForConditionalGeneration,
                              SiglipVisionConfig)

    tok = processor.tokenizer
    text = AutoModelForCausalLM.from_pretrained(TEXT_MODEL)
    text.resize_token_embeddings(len(tok))
    vision = SiglipVisionConfig(hidden_size=cfg.vision_hidden, intermediate_size=cfg.vision_mlp,
                                num_hidden_layers=cfg.vision_layers, num_attention_heads=cfg.vision_heads,
                                image_size=cfg.image_size, patch_size=cfg.patch_size, num_channels=3)
    im_end = tok.convert_tokens_to_ids(IM_END)
    config = LlavaConfig(vision_config=vision, text_config=text.config,
                         image_token_index=tok.convert_tokens_to_ids(IMAGE_TOKEN), image_seq_length=cfg.image_tokens,
                         vision_feature_select_strategy="full", vision_feature_layer=-1, tie_word_embeddings=True)
    config.text_config.vocab_size = len(tok)
    torch.manual_seed(cfg.seed)
    model = LlavaForConditionalGeneration(config)
    missing = model.model.language_model.load_state_dict(text.model.state_dict())
    assert not missing.missing_keys and not missing.unexpected_keys, missing
    model.tie_weights()
    assert model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr()
    model.generation_config = GenerationConfig(eos_token_id=im_end, pad_token_id=tok.pad_token_id)
    return model


# -------------------------------------------------------------------------------------------- corpus
class Corpus:
    """Batches of fresh pictures and their conversations: (input_ids, labels, pixel_values)."""

    def __init__(self, processor, cfg: BuildConfig, banned: set[str]):
        self.tok, self.cfg, self.banned = processor.tokenizer, cfg, banned
        self.rng = random.Random(cfg.seed + 1)
        self.mix = _corpus.Mixture()
        self.image_id = self.tok.convert_tokens_to_ids(IMAGE_TOKEN)
        self.image_text = IMAGE_TOKEN * cfg.image_tokens

    def batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pics = [_shapes.corpus_picture(self.rng, self.banned) for _ in range(self.cfg.batch_size)]
        docs = [_shapes.conversation(self.rng, p, self.mix, self.image_text) for p in pics]
        enc = [ids[: self.cfg.seq_len] for ids in self.tok(docs, add_special_tokens=False)["input_ids"]]
        width = max(len(x) for x in enc)
        ids = torch.full((len(enc), width), self.tok.pad_token_id, dtype=torch.long)  # [B, T]
        labels = torch.full((len(enc), width), -100, dtype=torch.long)  # [B, T]
        for i, x in enumerate(enc):
            ids[i, : len(x)] = torch.tensor(x)
            labels[i, : len(x)] = torch.tensor(x)
        labels[ids == self.image_id] = -100
        pix = torch.from_numpy(np.stack([pixels(p.image) for p in pics]))  # [B, 3, H, W]
        return ids, labels, pix


def lr_at(step: int, cfg: BuildConfig) -> float:
    """Linear warmup, then cosine decay to a tenth of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def pretrain(model, corpus: Corpus, cfg: BuildConfig) -> list[float]:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    model.train()
    losses, start = [], time.time()
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        ids, labels, pix = corpus.batch()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pix, labels=labels).loss
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


# -------------------------------------------------------------------------------------------- data
def write_task(cfg: BuildConfig, data_dir: Path) -> tuple[list[dict], list[dict], set[str]]:
    """Write the pictures and splits; returns (train rows, test rows, banned keys of the test pictures)."""
    train, test = _shapes.build_task(cfg.seed, cfg.n_train, cfg.n_test)
    (data_dir / "images").mkdir(parents=True, exist_ok=True)
    for old in (data_dir / "images").glob("*.png"):
        old.unlink()
    splits = {}
    for name, pics in (("train", train), ("test", test)):
        rows = []
        for i, p in enumerate(pics):
            rel = f"images/{name}-{i:04d}.png"
            (data_dir / rel).write_bytes(p.png())
            rows.append(_shapes.task_row(p, rel))
        write_jsonl(data_dir / f"{name}.jsonl", rows)
        splits[name] = rows
    return splits["train"], splits["test"], {p.key() for p in test}


# -------------------------------------------------------------------------------------------- eval
def generate(model, processor, rows: list[dict], sample: bool, seed: int, max_new_tokens: int = 32,
             batch_size: int = 50) -> list[tuple[str, str]]:
    """(completion text with special tokens kept, finish_reason) per row; stops at <|im_end|>."""
    from kitae.data.images import open_image

    tok = processor.tokenizer
    tok.padding_side = "left"
    im_end = tok.convert_tokens_to_ids(IM_END)
    torch.manual_seed(seed)
    out = []
    for i in range(0, len(rows), batch_size):
        chunk = rows[i : i + batch_size]
        texts = [processor.apply_chat_template(r["messages"], tokenize=False, add_generation_prompt=True) for r in chunk]
        images = [open_image(r["images"][0]) for r in chunk]
        enc = processor(text=texts, images=images, return_tensors="pt", padding=True)
        with torch.inference_mode():
            gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=sample,
                                 temperature=1.0 if sample else None, top_p=1.0 if sample else None,
                                 top_k=0 if sample else None, eos_token_id=im_end, pad_token_id=tok.pad_token_id)
        for seq in gen[:, enc["input_ids"].shape[1] :].tolist():
            stop = im_end in seq
            seq = seq[: seq.index(im_end) + 1] if stop else seq
            out.append((tok.decode(seq, skip_special_tokens=False), "stop" if stop else "length"))
    return out


def evaluate(model, processor, rows: list[dict], seed: int) -> dict:
    sampled = generate(model, processor, rows, sample=True, seed=seed)
    greedy = generate(model, processor, rows, sample=False, seed=seed)
    for row, (text, finish) in list(zip(rows, sampled))[:8]:
        print(f"  {row['messages'][-1]['content'][-1]['text']!r} ({row['reference_answer']}) -> {text!r} ({finish})")
    return {"sampled_t1": score(rows, sampled, ("kind",)), "greedy": score(rows, greedy, ("kind",))}


def check_round_trip(model, out_dir: Path, processor, row: dict) -> None:
    """Reload as users will (AutoProcessor, AutoModelForImageTextToText; no hub) and compare logits."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from kitae.data.images import open_image

    proc2 = AutoProcessor.from_pretrained(out_dir)
    model2 = AutoModelForImageTextToText.from_pretrained(out_dir).eval()
    text = proc2.apply_chat_template(row["messages"], tokenize=False, add_generation_prompt=True)
    enc = proc2(text=[text], images=[open_image(row["images"][0])], return_tensors="pt")
    assert int((enc["input_ids"] == proc2.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)).sum()) == model.config.image_seq_length
    mine = processor(text=[text], images=[open_image(row["images"][0])], return_tensors="pt")
    assert torch.equal(enc["input_ids"], mine["input_ids"])
    assert torch.allclose(enc["pixel_values"], torch.from_numpy(pixels(open_image(row["images"][0])))[None])
    with torch.no_grad():
        a, b = model(**enc).logits, model2(**enc).logits
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()


# ------------------------------------------------------------------------------------------ model card
CARD = """# kitae-tiny-vl

A tiny **base** vision-language model bundled with kitae so that reinforcement fine-tuning on image prompts runs
end to end on a CPU with no download. It is deliberately imperfect: it reads the picture, answers correctly and
follows the ChatML template only part of the time, the way a base model does before RL. Train it with GRPO on
the bundled vision task (`kitae/assets/data/vision`, `examples/vision.yaml`) and watch both numbers go up.

## Model
- Architecture: LLaVA (`LlavaForConditionalGeneration`; load with `AutoProcessor` and
  `AutoModelForImageTextToText`), **{params:,} parameters** (fp32 safetensors).
- Vision tower: SigLIP, {vl} layers, hidden {vh}, {vheads} heads, MLP {vmlp}; {size}x{size} pictures in
  {patch}x{patch} patches, so one picture is {tokens} `<image>` tokens (all patch features, no CLS).
- Projector: two linear layers with GELU, {vh} -> {th} -> {th}.
- Language part: the bundled text base model kitae-tiny-base (Llama, {tl} layers, hidden {th}), its weights as
  the starting point, with one more token, `<image>`; context {ctx} tokens.
- Processor: `LlavaProcessor` with kitae-tiny-base's tokenizer and a `SiglipImageProcessor` (resize to
  {size}x{size}, rescale 1/255, mean 0.5, std 0.5). The chat template is ChatML; a message's content is a string or
  a list of `{{"type": "text"}}` and `{{"type": "image"}}` parts.

## Corpus
Pictures drawn with PIL by `scripts/_shapes.py` (seeded; nothing downloaded): one coloured shape (its colour or
its shape), 1-5 shapes (how many), two shapes left/right or top/bottom (which colour where), and bar charts of
three coloured bars on a 1-5 grid (which is tallest, the value of one). English ChatML conversations about one
picture each; assistant turns are a mixture: {mixture}; answers are wrong with probability {p_wrong}. No test
picture (with its question) appears in the corpus.

Training: {steps} steps x {batch} conversations (up to {seq} tokens each), AdamW lr {lr}, cosine schedule, seed
{seed}; {train_min:.1f} min of wall time on {threads} CPU thread(s) (timings vary with the machine's load).
Final training loss {loss:.3f}. Everything above is also in `build_info.json`.

## Baseline on the bundled test split ({n_test} prompts)
Sampling at temperature 1.0, top_p 1.0, at most 32 new tokens, stop at `<|im_end|>`. Compliance is
`kitae.chat.is_template_compliant`, accuracy is `kitae.graders.answer_match.answers_match`.

| slice | n | compliance (T=1) | accuracy (T=1) | compliance (greedy) | accuracy (greedy) |
|---|---|---|---|---|---|
{table}

## Rebuild and re-measure
```bash
python scripts/build_vision_model.py      # also redraws the task (kitae/assets/data/vision)
python scripts/build_vision_model.py --eval-only kitae/assets/models/kitae-tiny-vl
```
Timings vary with the machine; the numbers above come from the committed checkpoint.
"""


def write_card(out_dir: Path, info: dict) -> None:
    (out_dir / "build_info.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    cfg, mix = info["config"], info["mixture"]
    endings = {n: mix[n] for n in ("clean", "ramble", "loop", "fake_turn", "run_on")}
    s, g = info["metrics"]["sampled_t1"], info["metrics"]["greedy"]
    table = "\n".join(f"| {k} | {m['n']} | {m['compliance']:.2f} | {m['accuracy']:.2f} | "
                      f"{g[k]['compliance']:.2f} | {g[k]['accuracy']:.2f} |" for k, m in s.items())
    text = info["text_config"]
    (out_dir / "README.md").write_text(CARD.format(
        params=info["params"], vl=cfg["vision_layers"], vh=cfg["vision_hidden"], vheads=cfg["vision_heads"],
        vmlp=cfg["vision_mlp"], size=cfg["image_size"], patch=cfg["patch_size"],
        tokens=(cfg["image_size"] // cfg["patch_size"]) ** 2, th=text["hidden_size"], tl=text["layers"],
        ctx=text["context"], mixture=", ".join(f"{n} {w / sum(endings.values()):.0%}" for n, w in endings.items()),
        p_wrong=mix["p_wrong"], steps=cfg["steps"], batch=cfg["batch_size"], seq=cfg["seq_len"], lr=cfg["lr"],
        seed=cfg["seed"], train_min=info["train_seconds"] / 60, threads=cfg["threads"], loss=info["final_loss"],
        n_test=s["all"]["n"], table=table), encoding="utf-8")


# -------------------------------------------------------------------------------------------- main
def build(cfg: BuildConfig, out_dir: Path, data_dir: Path) -> dict:
    t0 = time.time()
    train_rows, _, banned = write_task(cfg, data_dir)
    test_rows = load_prompts(data_dir / "test.jsonl")
    processor = build_processor(cfg)
    model = make_model(processor, cfg)
    params = sum(p.numel() for p in model.parameters())
    cfg = replace(cfg, threads=set_threads(cfg.threads, params=params))  # the card records the count used
    print(f"model: {params:,} parameters; {cfg.threads} torch thread(s)", flush=True)
    corpus = Corpus(processor, cfg, banned)
    t1 = time.time()
    losses = pretrain(model, corpus, cfg)
    t2 = time.time()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    check_round_trip(model, out_dir, processor, test_rows[0])
    metrics = evaluate(model, processor, test_rows, cfg.seed)
    t3 = time.time()
    text = model.config.text_config
    info = {"config": asdict(cfg), "mixture": asdict(_corpus.Mixture()), "params": params,
            "text_config": {"hidden_size": text.hidden_size, "layers": text.num_hidden_layers,
                            "context": text.max_position_embeddings},
            "final_loss": sum(losses[-20:]) / len(losses[-20:]), "train_seconds": round(t2 - t1), "metrics": metrics}
    write_card(out_dir, info)
    print(f"timings: setup {t1 - t0:.0f}s, training {t2 - t1:.0f}s, eval {t3 - t2:.0f}s; {len(train_rows)} train rows")
    print_metrics(metrics)
    return metrics


def eval_only(model_dir: Path, data_dir: Path, seed: int, threads: int | None) -> dict:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    set_threads(threads, model_dir)
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    t0 = time.time()
    metrics = evaluate(model, processor, load_prompts(data_dir / "test.jsonl"), seed)
    print(f"eval {time.time() - t0:.0f}s")
    print_metrics(metrics)
    return metrics


def main(argv: list[str] | None = None) -> None:
    build_main(argv, __doc__, BuildConfig, DEFAULT_OUT, DEFAULT_DATA, build, eval_only)


if __name__ == "__main__":
    main()

"""Build kitae-tiny-tools: a tiny base model that sometimes calls a calculator tool, and the bundled tools task.

    python scripts/build_tools_model.py                  # full build (about 35 min on 1 thread of a busy CPU)
    python scripts/build_tools_model.py --eval-only kitae/assets/models/kitae-tiny-tools

kitae-tiny-base never sees two-digit + two-digit sums and cannot do them in its head; this model is the same kind
of base model (scripts/build_base_model.py's tokenizer recipe, model and pretraining loop) whose chat template
offers tools the way Qwen2.5's does (Hermes style: the tools' JSON schemas in the system turn inside
``<tools></tools>``, calls as ``<tool_call>{json}</tool_call>``, results as a user turn of
``<tool_response>...</tool_response>``), pretrained on kitae-tiny-base's corpus plus conversations where the
``calculator`` tool is offered (scripts/_tools_corpus.py). Seeded end to end:
1. writes the task splits (kitae/assets/data/tools/train.jsonl, test.jsonl: two-digit ± two-digit questions in
   Japanese and English, disjoint (a, op, b));
2. trains the byte-level BPE with ``<tool_call>`` ``</tool_call>`` ``<tool_response>`` ``</tool_response>`` as
   single tokens that are text (not special, as in Qwen2.5), and checks that the template renders the corpus;
3. pretrains the Llama from scratch, then trains it on through LATER_STAGES (corpora richer in tool calls,
   where the model learns to copy numbers into a call and out of a result);
4. measures, with ``model.generate`` and a two-turn loop of its own (call the calculator when the first turn holds
   a well-formed call, then sample the answer), the share of test prompts whose first turn calls the tool and
   the final answer's accuracy; kitae's episode runner gives the numbers of a real run;
5. saves the checkpoint (safetensors) with a model card README.md and build_info.json holding those numbers.
"""

from __future__ import annotations

import ast
import json
import operator
import re
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tools_corpus as tc  # noqa: E402  (sibling helpers, not part of the package)
from _report import build_main, write_card  # noqa: E402
from build_base_model import (BuildConfig, build_tokenizer, check_tokenizer, generate_texts, make_model,  # noqa: E402
                              packed_rows, pretrain)

from kitae.chat import IM_END, IM_START, is_template_compliant  # noqa: E402
from kitae.data.loader import load_prompts, write_jsonl  # noqa: E402
from kitae.graders.answer_match import answers_match  # noqa: E402
from kitae.threads import set_threads  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "kitae" / "assets" / "models" / "kitae-tiny-tools"
DEFAULT_DATA = ROOT / "kitae" / "assets" / "data" / "tools"
EVAL = {"samples": 2, "temperature": 1.0, "max_new_tokens": 48, "seed": 0}
CALL = re.compile(re.escape(tc.TOOL_CALL) + r"\s*(.*?)\s*" + re.escape(tc.TOOL_CALL_END), re.S)


@dataclass(frozen=True)
class ToolsBuildConfig(BuildConfig):
    seq_len: int = 256  # a conversation with a tool call is about 225 tokens: the schema alone about 100
    batch_size: int = 16  # more updates in the minutes this build may take on a shared CPU
    steps: int = 650
    lr: float = 3e-3


@dataclass(frozen=True)
class Stage:
    """A further cosine schedule on the model so far, over a corpus with another tools mixture."""

    steps: int
    lr: float
    mixture: tc.ToolsMixture


# Measured on this recipe (first turns on the test split, 400 episodes): after stage 1 alone the model writes the
# call format but copies neither the question's numbers into the call nor the tool's result into its answer (0 of
# 400 calls exact); after stage 2 (more instructed calls) still 0; stage 3's short instructed conversations (no
# schema block: four times shorter, so many more copying examples per step) bring exact calls to 73% of calls,
# and stage 4 (the same mixture, fresh documents) the copying of the result. The unasked call rate stays near
# p_call throughout.
SHORT_INSTRUCTED = tc.ToolsMixture(p_tools_doc=0.75, p_instructed=0.7, p_short=0.7)
LATER_STAGES = (
    Stage(450, 2e-3, tc.ToolsMixture(p_tools_doc=0.6, p_instructed=0.7)),
    Stage(400, 2e-3, SHORT_INSTRUCTED),
    Stage(400, 1.5e-3, SHORT_INSTRUCTED),
)


# ------------------------------------------------------------------------------------------ the tool
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def calculator(expression: str) -> str:
    """The demo's calculator: + - * on integers (what the environment's calculator returns for these)."""
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError(f"not arithmetic: {expression!r}")
    return str(value(ast.parse(expression, mode="eval").body))


def parse_call(text: str) -> str | None:
    """The expression of the first well-formed calculator call in a turn's text, else None."""
    m = CALL.search(text)
    if not m:
        return None
    try:
        call = json.loads(m.group(1))
        args = call["arguments"]
        ok = call["name"] == tc.TOOL_NAME and isinstance(args, dict) and isinstance(args.get(tc.TOOL_ARG), str)
    except (ValueError, KeyError, TypeError):
        return None
    return args[tc.TOOL_ARG] if ok else None


# -------------------------------------------------------------------------------------------- eval
def episodes(model, tok, rows: list[dict], seed: int) -> list[dict]:
    """One two-turn episode per row: the first turn; if it calls the calculator, the tool's result and a second
    turn. Sampled at EVAL's temperature with torch seeded (seed for the first turns, seed + 1 for the second)."""
    tools = [tc.calculator_schema()]
    prompts = [tok.apply_chat_template(r["messages"], tools=tools, tokenize=False, add_generation_prompt=True)
               for r in rows]
    first = generate_texts(model, tok, prompts, True, seed, EVAL["max_new_tokens"])
    out = [{"first": t, "finish": f, "expression": parse_call(t), "final": t, "final_finish": f} for t, f in first]
    called = [i for i, e in enumerate(out) if e["expression"] is not None and e["finish"] == "stop"]
    follow = []
    for i in called:
        try:
            out[i]["result"] = calculator(out[i]["expression"])
        except (ValueError, SyntaxError, RecursionError) as err:
            out[i]["result"] = f"error: {err}"
        follow.append(prompts[i] + out[i]["first"] + "\n" + tc.tool_response_text(out[i]["result"])
                      + f"{IM_START}assistant\n")
    for i, (text, finish) in zip(called, generate_texts(model, tok, follow, True, seed + 1, EVAL["max_new_tokens"])):
        out[i].update(final=text, final_finish=finish)
    return out


def score(rows: list[dict], eps: list[dict]) -> dict:
    """Per slice: accuracy of the final answer, share of episodes whose first turn calls the tool (well-formed),
    share calling it with the question's own expression, and compliance of the final turn. The slices
    answered=tool / answered=head split episodes by whether they called the tool: accuracy there is what a
    reward for the right answer compares."""
    groups: dict[str, list[tuple[bool, ...]]] = {}
    for row, e in zip(rows, eps):
        a, op, b = re.search(r"(\d+)\D*?(\+|-|plus|minus|たす|ひく)\D*?(\d+)", row["messages"][-1]["content"]).groups()
        exact = e["expression"] is not None and e["expression"].replace(" ", "") == f"{a}{row['op']}{b}"
        hit = (answers_match(e["final"], row["reference_answer"]), e["expression"] is not None, exact,
               is_template_compliant(e["final"], e["final_finish"]))
        called = "tool" if e["expression"] is not None else "head"
        for key in ("all", f"lang={row['lang']}", f"op={row['op']}", f"answered={called}"):
            groups.setdefault(key, []).append(hit)
    names = ("accuracy", "tool_call", "exact_call", "compliance")
    return {k: {"n": len(v), **{n: round(sum(h[j] for h in v) / len(v), 3) for j, n in enumerate(names)}}
            for k, v in groups.items()}


def evaluate(model, tok, rows: list[dict], seed: int) -> dict:
    """EVAL["samples"] episodes per test prompt (seeds seed, seed + 2, ...), pooled."""
    eps, pooled = [], []
    for s in range(EVAL["samples"]):
        batch = episodes(model, tok, rows, seed + 2 * s)
        eps += batch
        pooled += rows
    for row, e in list(zip(rows, eps))[:6]:
        print(f"  {row['messages'][-1]['content']!r} -> {e['first']!r} -> {e['final']!r}")
    return {"sampled_t1": score(pooled, eps)}


def print_metrics(metrics: dict) -> None:
    for key, m in metrics["sampled_t1"].items():
        print(f"  {key:10s} n={m['n']:4d}  accuracy {m['accuracy']:.3f}  tool_call {m['tool_call']:.3f}  "
              f"exact_call {m['exact_call']:.3f}  compliance {m['compliance']:.3f}")


# ------------------------------------------------------------------------------------------ model card
CARD = """# kitae-tiny-tools

A tiny **base** causal LM that sometimes calls a calculator tool, bundled with kitae for the laptop agent demo
(`examples/tools.yaml`): GRPO on two-digit arithmetic it cannot do in its head, rewarding the right final answer,
should raise both the share of episodes that call the tool and held-out accuracy. Like kitae-tiny-base it is
deliberately imperfect.

## Model
- Architecture: Llama (`LlamaForCausalLM`), {layers} layers, hidden {hidden}, {heads} heads, MLP {mlp},
  tied embeddings, context {ctx} tokens; **{params:,} parameters** (fp32 safetensors).
- Tokenizer: byte-level BPE trained on the corpus (kitae-tiny-base's recipe), {vocab} tokens + `<tool_call>`,
  `</tool_call>`, `<tool_response>`, `</tool_response>` as single tokens that are text, not special (as in
  Qwen2.5: `decode(skip_special_tokens=True)` keeps them); digits split one by one. `<|im_end|>` ends a turn (eos),
  `<|endoftext|>` pads.
- Chat template: Qwen2.5-Instruct's with tools (Hermes style), trimmed. Without tools it is plain ChatML, as
  kitae-tiny-base's. With `tools=[schema, ...]` the system turn is the system message (or "{default_system}")
  followed by the schemas as JSON lines inside `<tools></tools>`; an assistant tool call renders as
  `<|im_start|>assistant\\n<tool_call>\\n{{"name": "calculator", "arguments": {{"expression": "47+38"}}}}\\n</tool_call><|im_end|>\\n`
  (arguments given as a JSON string are kept as they are), and tool results as one user turn
  `<|im_start|>user\\n<tool_response>\\n85\\n</tool_response><|im_end|>\\n`, several results inside it one after another.
  Every turn ends with `<|im_end|>`.

## Corpus
Synthetic, generated by `scripts/_tools_corpus.py` on top of `scripts/_corpus.py` (seeded; nothing downloaded):
- {p_base:.0%} of documents are kitae-tiny-base's corpus (arithmetic up to two-digit ± one-digit and short facts,
  Japanese and English, assistant turns a mixture of clean, rambling, looping and run-on ones, drill lines).
- {p_tools:.0%} offer the `calculator(expression: str) -> str` tool in the system turn ({p_default:.0%} with the
  default system prompt, {p_other:.0%} with another wording of the schema's descriptions). Of those, {p_hard:.0%} ask
  two-digit + two-digit or two-digit - two-digit (never seen without the tool); the rest ask kitae-tiny-base's
  questions, answered in the head.
- On a two-digit ± two-digit question the assistant calls the calculator in {p_call:.0%} of conversations, with
  the question's expression (`47+38`) or, in {p_miscopy:.0%} of calls, one number copied wrongly; reads the
  `<tool_response>` and answers with its number. Otherwise it answers in its head, wrongly {p_head_wrong:.0%} of
  the time.
- Under a system prompt that asks for the calculator ("Use the calculator tool for arithmetic.", never in the
  task) the assistant calls it {p_call_instructed:.0%} of the time: that is where the model learns how to call.
  Later stages add more of these, some without the schema block (short, so the copying is learned cheaply).
- No test question of the bundled tools task (as a + b or a - b, in any wording) appears in the corpus or the
  train split.

Training: {steps} steps × {batch} rows × {seq} tokens (whole documents packed per row), AdamW lr {lr},
cosine schedule, seed {seed}; then {later}. {train_min:.1f} min in all on {threads} CPU thread(s) of a shared
machine{how}. Final training loss {loss:.3f}. Everything above is also in `build_info.json`.

## Baseline on the bundled tools test split ({n_test} prompts × {samples} samples)
Each episode is sampled with `model.generate` at temperature 1.0 (torch seeds fixed), top_p 1.0, at most 48 new
tokens a turn, stopping at `<|im_end|>`, with the calculator schema above as `tools`: the first turn; when it holds
a well-formed call (`<tool_call>` JSON with name `calculator` and a string `expression`), the calculator's result
as a `<tool_response>` and a second turn. Accuracy is `kitae.graders.answer_match.answers_match` on the final
turn; *tool call* is the share of episodes whose first turn calls the tool; *exact call* those calling it with
the question's own expression; compliance is `kitae.chat.is_template_compliant` of the final turn. The slices
`answered=tool` and `answered=head` split the episodes by whether they called the tool: the gap in accuracy between
them is what a reward for the right answer pushes on. These are
the build script's own two-turn loop, not kitae's episode runner: the README's before/after table of
`examples/tools.yaml` gives the numbers of a real run.

| slice | n | accuracy | tool call | exact call | compliance |
|---|---|---|---|---|---|
{table}

## Rebuild and re-measure
```bash
python scripts/build_tools_model.py --out kitae/assets/models/kitae-tiny-tools   # also rewrites the task splits
python scripts/build_tools_model.py --eval-only kitae/assets/models/kitae-tiny-tools
```
Timings vary with the machine; the numbers above come from the committed checkpoint.
"""


def render_card(info: dict) -> str:
    cfg, mix, s = info["config"], info["tools_mixture"], info["metrics"]["sampled_t1"]
    table = "\n".join(f"| {k} | {m['n']} | {m['accuracy']:.2f} | {m['tool_call']:.2f} | {m['exact_call']:.2f} | "
                      f"{m['compliance']:.2f} |" for k, m in s.items())
    return CARD.format(
        layers=cfg["layers"], hidden=cfg["hidden_size"], heads=cfg["heads"], mlp=cfg["intermediate_size"],
        ctx=cfg["seq_len"] * 2, params=info["params"], vocab=cfg["vocab_size"], default_system=tc.DEFAULT_SYSTEM,
        p_base=1 - mix["p_tools_doc"], p_tools=mix["p_tools_doc"], p_default=mix["p_default_system"],
        p_other=mix["p_other_description"], p_hard=mix["p_hard"], p_call=mix["p_call"],
        p_miscopy=mix["p_miscopy"], p_head_wrong=mix["p_head_wrong"], p_call_instructed=mix["p_call_instructed"],
        later="; then ".join(
            f"{st['steps']} steps at lr {st['lr']} on a mixture with {st['mixture']['p_tools_doc']:.0%} tool "
            f"conversations, {st['mixture']['p_instructed']:.0%} of them instructed"
            + (f" ({st['mixture']['p_short']:.0%} of those without the schema)" if st['mixture']['p_short'] else "")
            for st in info["later_stages"]),
        how=(" (the committed checkpoint's stages were run one after another from saved weights: "
             + ", ".join(f"{k} {v / 60:.1f} min" for k, v in info["train_seconds_by_stage"].items()) + ")"
             if "train_seconds_by_stage" in info else ""),
        steps=cfg["steps"], batch=cfg["batch_size"],
        seq=cfg["seq_len"], lr=cfg["lr"], seed=cfg["seed"], train_min=info["train_seconds"] / 60,
        threads=cfg["threads"], loss=info["final_loss"], n_test=s["all"]["n"] // EVAL["samples"],
        samples=EVAL["samples"], table=table)


# -------------------------------------------------------------------------------------------- main
def check_template(tok) -> None:
    """The corpus's conversations are what the saved chat template renders (so RL prompts look like pretraining)."""
    tools = [tc.calculator_schema()]
    messages = [{"role": "user", "content": "What is 47+38?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": tc.TOOL_NAME, "arguments": {tc.TOOL_ARG: "47+38"}}}]},
                {"role": "tool", "name": tc.TOOL_NAME, "content": "85"},
                {"role": "assistant", "content": "85"}]
    expected = (tc.system_block(tc.DEFAULT_SYSTEM, tools) + f"{IM_START}user\nWhat is 47+38?{IM_END}\n"
                f"{IM_START}assistant\n{tc.tool_call_text('47+38')}{tc.tool_response_text('85')}"
                f"{IM_START}assistant\n85{IM_END}\n")
    rendered = tok.apply_chat_template(messages, tools=tools, tokenize=False)
    assert rendered == expected, f"template and corpus differ:\n{rendered!r}\n{expected!r}"


def corpus_rows(tok, cfg: ToolsBuildConfig, mix: tc.ToolsMixture, banned: set) -> tuple:
    """(input_ids, labels) of cfg.steps × cfg.batch_size packed rows of the corpus with mixture `mix`."""
    t0 = time.time()
    ids, labels = packed_rows(tok, cfg.steps * cfg.batch_size, cfg, set(),
                              document=lambda rng: tc.document(rng, mix, banned, set()))
    print(f"corpus {time.time() - t0:.1f}s ({int((labels != -100).sum()):,} tokens in {len(ids)} rows)", flush=True)
    return ids, labels


def later_stages(model, tok, cfg: ToolsBuildConfig, banned: set) -> list[float]:
    """Train on through LATER_STAGES (stage k's documents drawn with seed + k); the loss per step."""
    losses = []
    for k, stage in enumerate(LATER_STAGES, start=1):
        run = replace(cfg, seed=cfg.seed + k, steps=stage.steps, lr=stage.lr, warmup_steps=10)
        ids, labels = corpus_rows(tok, run, stage.mixture, banned)
        model.train()
        losses += pretrain(model, ids, labels, run)
    return losses


def build(cfg: ToolsBuildConfig, out_dir: Path, data_dir: Path) -> dict:
    t0 = time.time()
    train_rows, test_rows = tc.build_task(cfg.seed)
    write_jsonl(data_dir / "train.jsonl", train_rows)
    write_jsonl(data_dir / "test.jsonl", test_rows)
    texts = tc.tokenizer_training_text(cfg.seed)
    for token in tc.TOOL_TOKENS:
        texts = [t.replace(token, "") for t in texts]
    tok = build_tokenizer(cfg, out_dir, texts, tc.TOOLS_CHAT_TEMPLATE, tuple(tc.TOOL_TOKENS))
    check_template(tok)
    t1 = time.time()
    banned = {tc.triple_of(r) for r in test_rows}
    mix = tc.ToolsMixture()
    ids, labels = corpus_rows(tok, cfg, mix, banned)
    t2 = time.time()
    model = make_model(tok, cfg)
    params = sum(p.numel() for p in model.parameters())
    cfg = replace(cfg, threads=set_threads(cfg.threads, params=params))
    print(f"model: {params:,} parameters; {cfg.threads} torch thread(s)", flush=True)
    losses = pretrain(model, ids, labels, cfg)
    losses += later_stages(model, tok, cfg, banned)
    t3 = time.time()
    model.save_pretrained(out_dir)
    metrics = evaluate(model, tok, test_rows, cfg.seed)
    t4 = time.time()
    info = {"config": asdict(cfg), "tools_mixture": asdict(mix), "later_stages": [asdict(st) for st in LATER_STAGES],
            "base_mixture": asdict(tc._corpus.Mixture()),
            "tool_schema": tc.calculator_schema(), "eval": EVAL, "params": params,
            "final_loss": sum(losses[-20:]) / len(losses[-20:]), "train_seconds": round(t3 - t2), "metrics": metrics}
    write_card(out_dir, info, render_card(info))
    print(f"timings: task+tokenizer {t1 - t0:.0f}s, corpus {t2 - t1:.0f}s, training (all stages, with the "
          f"later stages' corpora) {t3 - t2:.0f}s, "
          f"eval {t4 - t3:.0f}s, total {t4 - t0:.0f}s")
    print_metrics(metrics)
    return metrics


def eval_only(model_dir: Path, data_dir: Path, seed: int, threads: int | None) -> dict:
    from transformers import AutoModelForCausalLM

    set_threads(threads, model_dir)
    tok = check_tokenizer(model_dir, tuple(tc.TOOL_TOKENS))
    check_template(tok)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    t0 = time.time()
    metrics = evaluate(model, tok, load_prompts(data_dir / "test.jsonl"), seed)
    print(f"eval {time.time() - t0:.0f}s")
    print_metrics(metrics)
    return metrics


def main(argv: list[str] | None = None) -> None:
    build_main(argv, __doc__, ToolsBuildConfig, DEFAULT_OUT, DEFAULT_DATA, build, eval_only)


if __name__ == "__main__":
    main()

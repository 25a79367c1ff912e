"""Agents: episodes per second with tools that take time, concurrent versus one at a time; and kitae's GRPO step
with an environment versus TRL's GRPOTrainer with ``tools=`` on equal work.

    python benchmarks/agents.py [--parts episodes,trl] [--tools sleep,python] [--prompts 8] [--group 4]
                                [--reps 2] [--steps 3] [--pairs 1] [--model PATH]

The model is the bundled kitae-tiny-tools (a Qwen2.5-style chat template that offers tools and reads
``<tool_call>{json}</tool_call>``; it calls its ``calculator(expression)`` tool in some episodes). The rows are the
first --prompts of the bundled tools task (two-digit +/- two-digit questions) in file order, each with the system
prompt "Use the calculator tool for arithmetic." (the wording its pretraining corpus asks for the tool with), so
that most episodes call the tool. The tool is the model's ``calculator(expression)``, in one of two forms:

- ``sleep``: waits 0.2 s and returns a fixed text ("42"): a tool whose time is latency (an HTTP API, a search);
- ``python``: runs ``print(<expression>)`` as a program in kitae's sandbox (kitae.agents.environments.PythonSandbox,
  the python tool's bubblewrap isolation and limits): a tool whose time is a process start and CPU.

1. ``episodes``: kitae's episode runner (kitae.agents.engine.agent_engine over the in-process hf engine, the
   model's own ToolChat, the tool) on P prompts x G samples, two arms on the same model, rows, seed and limits:
   - ``concurrent``: one ``generate_rows`` call for all P x G episodes, as a training step runs them: lock-step
     turns, each turn one sampling call, all of a turn's tool calls at once (the run's cap set to P x G);
   - ``one-at-a-time``: the same runner called once per episode (P x G calls of one episode; episode k samples with
     the seed + k, so a prompt's G samples differ as they do in one call).
   Measured: episodes per second over --reps rounds of all P x G episodes after a warm-up call (one prompt, not
   counted). The sampling of the two arms differs (batched vs one sequence, the seeds), so the work may differ: the
   turns, tool calls, tool seconds (the tool's own time, summed) and sampled tokens of each arm are printed beside
   the ratio. Target: concurrent >= 4x one at a time with the 0.2 s tool.
2. ``trl``: seconds per GRPO step, kitae (``environment: {tools: [the tool], ...}``) against TRL 1.16's
   GRPOTrainer with ``tools=[the same function]``: the same model, rows (file order, not shuffled), group size,
   prompts per step, temperature, end markers, optimizer and loss (GRPO, no KL, every row trained: kitae
   ``optim.skip_zero_advantage: false``), the same reward function (the final answer against the reference), the
   same tool. Turns: TRL's ``max_tool_calling_iterations`` = kitae's ``environment.max_turns`` - 1 (TRL counts the
   tool rounds after the first turn); length: TRL's ``max_completion_length`` (sampled + tool tokens of the
   episode) = kitae's ``environment.episode_max_tokens`` = ``turn_max_new_tokens``. TRL reads ``<tool_call>``
   calls through the tokenizer's response template, which it sets only for chat templates it knows; the
   benchmark sets TRL's own Qwen one (trl.chat_template_utils.qwen3_template) on the tokenizer. How the two
   differ in what they do, printed beside the ratio: kitae runs all of a turn's calls of every episode at once;
   TRL calls a sync tool's calls one after another, episode after episode (an async tool's calls of one episode
   together, episodes still one after another), and it does not run the calls of an episode's last allowed turn,
   which kitae does (they go into the episode's messages): the tool calls, turns and sampled tokens of each side
   are printed. Target: TRL's seconds per step >= 2x kitae's.

Each arm runs in a child process, arms taking turns (pair 1 in order, pair 2 reversed) so load from other
programs hits both alike; each child's first call or step is a warm-up, not counted. CPU, fp32, --threads torch
threads each (default 1). The 1-minute load average before and after each part says whether the machine was busy.
Not part of the test suite (tests/test_agents_benchmark.py checks the settings the two sides share).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MODEL = ROOT / "kitae" / "assets" / "models" / "kitae-tiny-tools"
ROWS = ROOT / "kitae" / "assets" / "data" / "tools" / "train.jsonl"
INSTRUCTION = "Use the calculator tool for arithmetic."
SLEEP_S, SLEEP_RESULT = 0.2, "42"
MAX_TURNS = 3  # assistant turns per episode (TRL: 2 tool rounds after the first turn)
MAX_NEW = 96  # tokens after the prompt per episode, sampled and put in (TRL's max_completion_length)
MAX_TOOL_CALLS = 8  # per episode (TRL has no such limit; over MAX_TURNS x the calls a turn makes here)
TEMP, LR, SEED = 1.0, 2e-4, 0
TOOL_TIMEOUT_S = 60.0  # no call is cut: both sides run each call to its end
ARMS = ("concurrent", "one-at-a-time")
SIDES = ("kitae", "trl")
TOOLS = ("sleep", "python")


# ---- the tools: the model's calculator(expression), timed -----------------------------------------------------
class Ledger:
    """The calls a tool got in this process and the seconds they took (both sides count the same way)."""

    def __init__(self):
        self.lock, self.calls, self.seconds = threading.Lock(), 0, 0.0

    def add(self, seconds: float) -> None:
        with self.lock:
            self.calls, self.seconds = self.calls + 1, self.seconds + seconds

    def take(self) -> tuple[int, float]:
        with self.lock:
            out, self.calls, self.seconds = (self.calls, self.seconds), 0, 0.0
        return out


LEDGER = Ledger()


def sleep_tool(expression: str) -> str:
    """Evaluate an arithmetic expression with numbers, +, -, *, / and parentheses.

    Args:
        expression: The expression to evaluate, e.g. "12 * (3 + 4)".

    Returns:
        The value of the expression.
    """
    t0 = time.perf_counter()
    time.sleep(SLEEP_S)
    LEDGER.add(time.perf_counter() - t0)
    return SLEEP_RESULT


_SANDBOX: list = []  # the PythonSandbox, opened on first use (bubblewrap is looked up once)


def python_tool(expression: str) -> str:
    """Evaluate an arithmetic expression with numbers, +, -, *, / and parentheses.

    Args:
        expression: The expression to evaluate, e.g. "12 * (3 + 4)".

    Returns:
        The value of the expression.
    """
    from kitae.agents.environments import PythonSandbox

    if not _SANDBOX:
        _SANDBOX.append(PythonSandbox())
    t0 = time.perf_counter()
    try:
        return _SANDBOX[0].python(f"print({expression})")
    finally:
        LEDGER.add(time.perf_counter() - t0)


for _fn in (sleep_tool, python_tool):  # the name the model calls (its schema and TRL's dispatch read __name__)
    _fn.__name__ = _fn.__qualname__ = "calculator"
TOOL_FUNCTIONS = {"sleep": sleep_tool, "python": python_tool}
TOOL_TARGETS = {"sleep": "agents:sleep_tool", "python": "agents:python_tool"}  # for kitae's environment.tools


def final_answer(completions, reference_answer, **kwargs) -> list[float]:
    """1.0 when the episode's last message holds the reference answer, else 0.0: a TRL-style reward function
    (completions as message lists), the same on both sides."""
    from kitae.graders.answer_match import answers_match

    out = []
    for c, ref in zip(completions, reference_answer):
        text = c[-1].get("content") or "" if isinstance(c, list) and c else str(c)
        out.append(float(answers_match(str(text), str(ref))))
    return out


# ---- rows and settings --------------------------------------------------------------------------------------
def task_rows(n: int, path: Path = ROWS) -> list[dict]:
    """The first ``n`` rows of the tools task, in file order, each asked to use the calculator."""
    from kitae.data.loader import load_prompts

    rows = load_prompts(path)[:n]
    for r in rows:
        r["messages"] = [{"role": "system", "content": INSTRUCTION},
                         *[m for m in r["messages"] if m["role"] != "system"]]
    return rows


def limits() -> dict:
    """kitae's episode limits (kitae.agents.config.EnvironmentConfig's fields)."""
    return {"max_turns": MAX_TURNS, "max_tool_calls": MAX_TOOL_CALLS, "turn_max_new_tokens": MAX_NEW,
            "episode_max_tokens": MAX_NEW, "tool_timeout_s": TOOL_TIMEOUT_S}


def side_settings(side: str, tool: str, model: str, rows_file: str, prompts: int, group: int, steps: int,
                  threads: int, out_dir: str) -> dict:
    """One side of part 2: kitae's config (a dict for load_train_config) or TRL's GRPOConfig keywords. The numbers
    they share are the same by construction; tests/test_agents_benchmark.py checks."""
    if side == "trl":
        return {"tool": TOOL_FUNCTIONS[tool], "config": dict(
            output_dir=out_dir, per_device_train_batch_size=prompts * group, num_generations=group,
            max_completion_length=MAX_NEW, max_tool_calling_iterations=MAX_TURNS - 1, learning_rate=LR,
            temperature=TEMP, top_p=1.0, top_k=0, repetition_penalty=1.0, beta=0.0, loss_type="grpo",
            num_iterations=1, epsilon=0.2, max_steps=steps, logging_steps=1, save_strategy="no", report_to=[],
            bf16=False, use_cpu=True, seed=SEED, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
            weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.99, disable_tqdm=True, shuffle_dataset=False,
            gradient_checkpointing=False, mask_truncated_completions=False, scale_rewards="group",
        )}
    return {"name": "agents-bench", "output_dir": out_dir, "seed": SEED, "threads": threads,
            "model": {"path": model, "gradient_checkpointing": False},
            "data": {"train": rows_file, "eval": None, "shuffle": False},
            "rewards": [{"name": "final_answer", "function": "agents:final_answer"}],
            "environment": {"tools": [TOOL_TARGETS[tool]], **limits(), "max_concurrent_tools": prompts * group},
            "sampling": {"group_size": group, "temperature": TEMP, "top_p": 1.0, "top_k": 0, "max_new_tokens": MAX_NEW},
            "algorithm": {"loss": "grpo", "eps_low": 0.2, "eps_high": 0.2, "kl": {"coef": 0.0}, "mu": 1},
            "optim": {"steps": steps, "prompts_per_step": prompts, "lr": LR, "micro_batch_size": prompts * group,
                      "skip_zero_advantage": False, "betas": [0.9, 0.99], "weight_decay": 0.0,
                      "max_grad_norm": 1.0, "scheduler": "constant", "warmup_steps": 0},
            "logging": {"save_every": 0}, "eval": {"every": 0}}


def trl_tokenizer(model: str):
    """The model's tokenizer with TRL's Qwen response template (and legacy schema) set, so that TRL's
    parse_response reads ``<tool_call>{json}</tool_call>`` calls; TRL sets them itself only for templates it knows."""
    from trl import chat_template_utils as ctu

    from kitae.models import load_tokenizer

    tok = load_tokenizer(model)
    tok.response_template = ctu.qwen3_template
    tok.response_schema = ctu.qwen3_schema
    return tok


# ---- part 1: the episode runner, concurrent vs one at a time --------------------------------------------------
def run_episodes_arm(args) -> dict:
    from kitae.agents.chat import ToolChat
    from kitae.agents.engine import agent_engine
    from kitae.agents.episodes import Limits
    from kitae.agents.tools import Tools, function_tool
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.hf import HFEngine

    engine = HFEngine.from_pretrained(args.model)
    tools = Tools(tools=[function_tool(TOOL_FUNCTIONS[args.tool])], tool_timeout_s=TOOL_TIMEOUT_S,
                  max_concurrent_tools=args.prompts * args.group)
    lim = limits()
    agent = agent_engine(engine, ToolChat(engine.tokenizer), tools, Limits(
        lim["max_turns"], lim["max_tool_calls"], lim["turn_max_new_tokens"], lim["episode_max_tokens"]))
    rows = task_rows(args.prompts, Path(args.rows))
    sp = SamplingParams(temperature=TEMP, max_new_tokens=MAX_NEW, seed=SEED)

    def episodes(batch: list[dict]) -> list:
        if args.arm == "concurrent":
            groups = agent.generate_rows([r["messages"] for r in batch], [dict(r) for r in batch], args.group, sp)
            return [c for g in groups for c in g]
        return [agent.generate_rows([r["messages"]], [dict(r)], 1, sp.offset_seed(k))[0][0]
                for k, r in enumerate(r for r in batch for _ in range(args.group))]

    rounds = []
    try:
        for rnd in range(args.reps + 1):  # round 0: the warm-up, one prompt
            LEDGER.take()
            t0 = time.perf_counter()
            done = episodes(rows[:1] if rnd == 0 else rows)
            secs = time.perf_counter() - t0
            calls, tool_secs = LEDGER.take()
            if rnd:
                rounds.append({"secs": secs, **episode_work(done), "ledger_calls": calls, "tool_secs": tool_secs})
    finally:
        agent.close()
    return {"rounds": rounds}


def episode_work(completions: list) -> dict:
    """What a set of episodes did: episodes, turns, tool calls, sampled tokens, why they ended."""
    eps = [c.episode for c in completions]
    ends: dict[str, int] = {}
    for e in eps:
        ends[e.end] = ends.get(e.end, 0) + 1
    return {"episodes": len(eps), "turns": sum(len(e.turns) for e in eps),
            "tool_calls": sum(len(e.tool_calls) for e in eps),
            "sampled_tokens": sum(c.sampled_tokens for c in completions), "ends": ends}


# ---- part 2: a GRPO step, kitae vs TRL ------------------------------------------------------------------------
def run_kitae_step(args) -> dict:
    from kitae.trainer.config import load_train_config
    from kitae.trainer.loop import Trainer

    cfg = load_train_config(data=side_settings("kitae", args.tool, args.model, args.rows, args.prompts, args.group,
                                               args.steps, args.threads, tempfile.mkdtemp(prefix="kitae-agents-")))
    trainer = Trainer(cfg)
    rows, steps = args.prompts * args.group, []

    def on_step(step, m):
        calls, tool_secs = LEDGER.take()
        steps.append({"secs": m["secs_per_step"], "generate": m["secs_generate"], "update": m["secs_train"],
                      "turns": m.get("agent/turns", 0.0) * rows, "tool_calls": m.get("agent/tool_calls", 0.0) * rows,
                      "ledger_calls": calls, "tool_secs": tool_secs, "sampled_tokens": m["len_mean"] * rows,
                      "reward": m.get("reward")})

    LEDGER.take()
    trainer.on_step = on_step
    trainer.train()
    return {"steps": steps}


def run_trl_step(args) -> dict:
    import datasets
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from kitae.models import load_causal_lm
    from vs_trl import end_markers

    settings = side_settings("trl", args.tool, args.model, args.rows, args.prompts, args.group, args.steps,
                             args.threads, tempfile.mkdtemp(prefix="trl-agents-"))
    tok = trl_tokenizer(args.model)
    model = load_causal_lm(args.model)
    model.generation_config.eos_token_id = end_markers(tok)[1]  # stop where kitae stops
    rows = task_rows(args.prompts, Path(args.rows))
    ds = datasets.Dataset.from_list([{"prompt": r["messages"], "reference_answer": r["reference_answer"]}
                                     for r in rows])
    steps, gen, work = [], [0.0], {}

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t, gen[0] = time.perf_counter(), 0.0
            LEDGER.take()

        def on_step_end(self, a, state, control, **kw):
            secs = time.perf_counter() - self.t
            calls, tool_secs = LEDGER.take()
            steps.append({"secs": secs, "generate": gen[0], "update": secs - gen[0], "turns": work["turns"],
                          "tool_calls": work["tool_calls"], "ledger_calls": calls, "tool_secs": tool_secs,
                          "sampled_tokens": work["sampled_tokens"],
                          "reward": (trainer._metrics["train"].get("reward") or [None])[-1]})

    trainer = GRPOTrainer(model=model, reward_funcs=[final_answer], args=GRPOConfig(**settings["config"]),
                          train_dataset=ds, processing_class=tok, tools=[settings["tool"]], callbacks=[Timer()])
    generate, rollout = trainer._generate, trainer._generate_and_score_completions

    def counted_generate(prompts):  # what TRL's tool loop did: assistant turns, tool messages, sampled tokens
        out = generate(prompts)
        tool_mask, completions = out[2], out[3]
        work["turns"] = sum(m.get("role") == "assistant" for c in completions for m in c)
        work["tool_calls"] = sum(m.get("role") == "tool" for c in completions for m in c)
        work["sampled_tokens"] = sum(sum(m) for m in tool_mask) if tool_mask is not None else 0
        return out

    def timed_rollout(*a, **kw):  # generation with the tool loop, scoring, advantages: TRL's rollout phase
        t0 = time.perf_counter()
        try:
            return rollout(*a, **kw)
        finally:
            gen[0] += time.perf_counter() - t0

    trainer._generate, trainer._generate_and_score_completions = counted_generate, timed_rollout
    trainer.train()
    return {"steps": steps}


def child(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    # the tools and the reward from the module kitae imports them from ("agents:..."), so one ledger counts
    import agents

    global LEDGER
    LEDGER = agents.LEDGER
    run = {"kitae": run_kitae_step, "trl": run_trl_step}.get(args.arm, run_episodes_arm)
    Path(args.out).write_text(json.dumps(run(args)))


# ---- the parent ----------------------------------------------------------------------------------------------
def run_child(arm: str, tool: str, args, rows_file: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, __file__, "--arm", arm, "--tool", tool, "--out", out, "--model", args.model,
           "--rows", rows_file, "--prompts", str(args.prompts), "--group", str(args.group), "--reps", str(args.reps),
           "--steps", str(args.steps), "--threads", str(args.threads)]
    path = os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])  # "agents:sleep_tool" is this file's
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "PYTHONPATH": path,
           "TRL_EXPERIMENTAL_SILENCE": "1"}
    quiet = None if args.verbose else subprocess.DEVNULL
    subprocess.run(cmd, check=True, env=env, stdout=quiet, stderr=None if args.verbose else subprocess.PIPE)
    return json.loads(Path(out).read_text())


def paired(arms: tuple[str, ...], tool: str, args, rows_file: str, key: str) -> dict[str, list[list[dict]]]:
    """Every arm --pairs times, the order reversed every other pair; per arm, per pair, its counted rounds or
    steps (a step run's first step is its warm-up)."""
    runs: dict[str, list[list[dict]]] = {a: [] for a in arms}
    for p in range(args.pairs):
        for arm in arms if p % 2 == 0 else arms[::-1]:
            result = run_child(arm, tool, args, rows_file)
            runs[arm].append(result[key][1:] if key == "steps" else result[key])
            print(f"  {tool} pair {p + 1}/{args.pairs}: {arm} done (load {os.getloadavg()[0]:.1f})", flush=True)
    return runs


def pair_ratios(runs: dict[str, list[list[dict]]], over: str, under: str, value) -> tuple[float, list[float]]:
    """value(over) / value(under): over all pairs pooled (medians), and per pair."""
    pooled = value([i for p in runs[over] for i in p]) / value([i for p in runs[under] for i in p])
    return pooled, [value(a) / value(b) for a, b in zip(runs[over], runs[under])]


def total(items: list[dict], key: str) -> float:
    return sum(i[key] for i in items) / max(1, len(items))


def load_line(before: float, after: float) -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    busy = "busy" if max(before, after) > cores * 0.75 else "quiet"
    return f"1-minute load average {before:.1f} -> {after:.1f} on {cores} cores ({busy})"


def bench_episodes(args, rows_file: str) -> dict:
    results = {}
    for tool in args.tools.split(","):
        load0 = os.getloadavg()[0]
        runs = paired(ARMS, tool, args, rows_file, "rounds")
        results[tool] = {"runs": runs, "load": (load0, os.getloadavg()[0])}
        report_episodes(tool, results[tool], args)
    return results


def report_episodes(tool: str, result: dict, args) -> None:
    runs = result["runs"]
    what = f"sleep {SLEEP_S} s, returns {SLEEP_RESULT!r}" if tool == "sleep" else "print(expression) in the sandbox"
    print(f"\nepisodes, tool {tool} ({what}): {args.prompts} prompts x {args.group} samples, <= {MAX_TURNS} turns, "
          f"<= {MAX_NEW} tokens an episode; {load_line(*result['load'])}")
    print(f"{'':16}{'rounds':>7}{'s/round':>9}{'episodes/s':>12}{'turns':>7}{'calls':>7}{'tool s':>8}"
          f"{'sampled':>9}  ends")
    rate = lambda rounds: statistics.median(r["episodes"] / r["secs"] for r in rounds)  # noqa: E731
    for arm, pairs in runs.items():
        rounds = [r for p in pairs for r in p]
        secs = statistics.median(r["secs"] for r in rounds)
        ends = {}
        for r in rounds:
            for k, v in r["ends"].items():
                ends[k] = ends.get(k, 0) + v / len(rounds)
        print(f"{arm:16}{len(rounds):>7}{secs:>9.2f}{rate(rounds):>12.2f}{total(rounds, 'turns'):>7.0f}"
              f"{total(rounds, 'tool_calls'):>7.0f}{total(rounds, 'tool_secs'):>8.1f}"
              f"{total(rounds, 'sampled_tokens'):>9.0f}  {', '.join(f'{k} {v:.0f}' for k, v in sorted(ends.items()))}")
    ratio, per_pair = pair_ratios(runs, "concurrent", "one-at-a-time", rate)
    target = "; target >= 4x" if tool == "sleep" else ""
    print(f"concurrent / one-at-a-time: {ratio:.2f}x episodes per second (pairs {min(per_pair):.2f}-"
          f"{max(per_pair):.2f}x){target}; turns, calls, tool seconds and sampled tokens per round above: the two "
          "arms sample differently")
    result["ratio"], result["pair_ratios"] = ratio, per_pair


def bench_trl(args, rows_file: str) -> dict:
    tool = args.trl_tool
    load0 = os.getloadavg()[0]
    runs = paired(SIDES, tool, args, rows_file, "steps")
    result = {"runs": runs, "load": (load0, os.getloadavg()[0])}
    print(f"\nGRPO step with tool {tool}: {args.prompts} prompts x {args.group} samples, <= {MAX_TURNS} turns "
          f"(TRL max_tool_calling_iterations {MAX_TURNS - 1}), <= {MAX_NEW} tokens an episode, GRPO, beta 0, every "
          f"row trained, CPU fp32, {args.threads} thread(s); {load_line(*result['load'])}")
    print(f"{'':8}{'steps':>6}{'s/step':>8}{'range':>13}{'rollout':>9}{'update':>8}{'turns':>7}{'calls':>7}"
          f"{'tool s':>8}{'sampled':>9}{'reward':>8}")
    per_step = lambda steps: statistics.median(s["secs"] for s in steps)  # noqa: E731
    for side, pairs in runs.items():
        steps = [s for p in pairs for s in p]
        rewards = [s["reward"] for s in steps if s["reward"] is not None]
        reward = f"{statistics.fmean(rewards):.2f}" if rewards else "-"
        print(f"{side:8}{len(steps):>6}{per_step(steps):>8.2f}{min(s['secs'] for s in steps):>7.2f}-"
              f"{max(s['secs'] for s in steps):<5.2f}{statistics.median(s['generate'] for s in steps):>9.2f}"
              f"{statistics.median(s['update'] for s in steps):>8.2f}{total(steps, 'turns'):>7.0f}"
              f"{total(steps, 'ledger_calls'):>7.0f}{total(steps, 'tool_secs'):>8.1f}"
              f"{total(steps, 'sampled_tokens'):>9.0f}{reward:>8}")
    result["ratio"], result["pair_ratios"] = pair_ratios(runs, "trl", "kitae", per_step)
    print(f"trl / kitae: {result['ratio']:.2f}x seconds per step (pairs {min(result['pair_ratios']):.2f}-"
          f"{max(result['pair_ratios']):.2f}x); target >= 2x (turns, tool calls, tool seconds and "
          "sampled tokens per step above; kitae also runs the calls of an episode's last allowed turn, TRL does not)")
    return result


def write_rows(n: int, source: Path) -> str:
    """The rows both sides train on, as a JSONL file kitae reads (TRL's dataset is built from the same rows)."""
    out = Path(tempfile.mkdtemp(prefix="agents-bench-rows-")) / "train.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in task_rows(n, source)))
    return str(out)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="episodes,trl", help="episodes (concurrent vs one at a time), trl (vs TRL)")
    ap.add_argument("--tools", default="sleep,python", help="the tools of the episodes part: sleep, python")
    ap.add_argument("--trl-tool", default="sleep", choices=TOOLS, help="the tool of the part against TRL")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per round or step")
    ap.add_argument("--group", type=int, default=4, help="samples per prompt")
    ap.add_argument("--reps", type=int, default=2, help="counted rounds of every episode per child (episodes)")
    ap.add_argument("--steps", type=int, default=3, help="GRPO steps per child, the warm-up included (trl)")
    ap.add_argument("--pairs", type=int, default=1, help="rounds of every arm, the order alternating")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per child")
    ap.add_argument("--model", default=str(MODEL), help="a model whose chat template renders tools (Hermes style)")
    ap.add_argument("--rows", default=str(ROWS), help="the task's JSONL (messages, reference_answer)")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--arm", choices=ARMS + SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--tool", choices=TOOLS, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.steps < 2:
        ap.error("--steps must be at least 2: the first step is warm-up")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.arm:
        return child(args)
    if not (Path(args.model) / "config.json").exists():
        sys.exit(f"no model at {args.model}: build kitae-tiny-tools (python scripts/build_tools_model.py) or give "
                 "--model, a folder whose chat template renders tools in Qwen2.5's <tool_call> format")
    rows_file = write_rows(args.prompts, Path(args.rows))  # the rows as both sides read them
    args.rows = rows_file
    results = {}
    parts = args.parts.split(",")
    if "episodes" in parts:
        results["episodes"] = bench_episodes(args, rows_file)
    if "trl" in parts:
        results["trl"] = bench_trl(args, rows_file)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

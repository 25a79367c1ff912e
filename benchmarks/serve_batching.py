"""`kitae serve model` throughput with concurrent clients: continuous batching vs one request at a time, same run.

    python benchmarks/serve_batching.py [--model bundled] [--clients 16] [--seconds 20] [-n 1] [--max-tokens 48]
                                        [--runs 3] [--max-batch 64] [--threads 1]

Starts two `kitae serve model` processes on the same model, each with ``--threads`` torch threads: one with
``--max-batch 64`` (continuous batching: requests join the running batch) and the baseline with
``--max-batch 1`` (one request at a time, as the server did before). Each is put under the same steady load:
``--clients`` threads, each sending its next rollout request as soon as its last one is answered, for
``--seconds`` (vLLM's /v1/completions: a prompt of the bundled arithmetic task as token ids, ``n`` samples,
temperature 1, a seed, the ChatML stops, log-probs and token ids, as kitae's ``server`` engine sends them).
Reported: completion tokens of the requests answered within the window per second, the median over ``--runs``
runs (the two servers alternate), and the ratio. A seeded request gives the same tokens batched or alone, so
the script also checks that both servers returned the same tokens for the requests both answered.

Measured (shared 2-core machine, busy: load average 11-15; bundled kitae-tiny-base; defaults):
    continuous batching (--max-batch 64): 350 tokens/s
    one request at a time (--max-batch 1): 69 tokens/s
    ratio: 5.05x (run by run: 4.23x, 5.10x, 6.82x); the same tokens ... from both servers: yes
Two earlier invocations at load averages 6-12: 3.90x and 4.31x. With -n 8 (a GRPO group per request; the
baseline then decodes 8 rows together too): 2.01x. More in docs/scale.md ("kitae serve model").
Not part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from kitae.chat import END_OF_TEXT, IM_END
from kitae.models import BUNDLED_DATA, load_tokenizer, resolve_model_path


def start_server(model: str, max_batch: int, threads: int) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "kitae.cli.main", "serve", "model", "--model", model, "--port", "0",
           "--max-batch", str(max_batch)]
    env = os.environ | {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    first = lines.get(timeout=300)
    if " on http://" not in first:
        proc.kill()
        raise SystemExit(f"kitae serve model did not start: {first!r}")
    return proc, first.strip().rsplit(" on ", 1)[1]


def prompt_ids(model: str, count: int) -> list[list[int]]:
    tok = load_tokenizer(model)
    rows = [json.loads(line) for line in (Path(BUNDLED_DATA) / "train.jsonl").read_text().splitlines()[:count]]
    texts = [tok.apply_chat_template(r["messages"], tokenize=False, add_generation_prompt=True) for r in rows]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def body(prompt: list[int], n: int, max_tokens: int, seed: int) -> dict:
    return {"prompt": prompt, "n": n, "max_tokens": max_tokens, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
            "seed": seed, "stop": [IM_END, END_OF_TEXT], "include_stop_str_in_output": True,
            "skip_special_tokens": False, "logprobs": 0, "return_tokens_as_token_ids": True}


def run(url: str, prompts: list[list[int]], clients: int, seconds: float, n: int, max_tokens: int):
    """Steady load for ``seconds``: each client sends its next request as soon as its last one is answered.
    Returns (completion tokens of the requests answered within the window, {(client, k): the choices' tokens})."""
    deadline = time.perf_counter() + seconds

    def client(c: int) -> dict[tuple[int, int], list[list[str]]]:
        out, k = {}, 0
        with httpx.Client(base_url=url, timeout=600) as http:
            while time.perf_counter() < deadline:
                prompt = prompts[(c + k * clients) % len(prompts)]
                reply = http.post("/v1/completions", json=body(prompt, n, max_tokens, seed=c * 10_000 + k))
                reply.raise_for_status()
                if time.perf_counter() <= deadline:  # answered in the window
                    out[(c, k)] = [ch["logprobs"]["tokens"] for ch in reply.json()["choices"]]
                k += 1
        return out

    with ThreadPoolExecutor(clients) as pool:
        tokens = {key: value for part in pool.map(client, range(clients)) for key, value in part.items()}
    return sum(len(t) for choices in tokens.values() for t in choices), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled", help="a local causal LM folder; bundled = kitae-tiny-base")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each run")
    parser.add_argument("-n", type=int, default=1, help="samples per request")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-batch", type=int, default=64, help="the batching server's --max-batch")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per server process")
    args = parser.parse_args()
    model = resolve_model_path(None if args.model == "bundled" else args.model)
    prompts = prompt_ids(model, 256)
    servers = {"batching": start_server(model, args.max_batch, args.threads),
               "one at a time": start_server(model, 1, args.threads)}
    speeds: dict[str, list[float]] = {name: [] for name in servers}
    same = True
    try:
        for _, url in servers.values():  # warm-up: first calls allocate
            run(url, prompts, 2, 1.0, args.n, 4)
        for k in range(args.runs):
            seen = {}
            for name, (_, url) in servers.items():
                tokens, seen[name] = run(url, prompts, args.clients, args.seconds, args.n, args.max_tokens)
                speeds[name].append(tokens / args.seconds)
                print(f"run {k + 1}: {name:>13}: {len(seen[name])} requests, {tokens:,} tokens in {args.seconds:g} s "
                      f"= {tokens / args.seconds:,.0f} tokens/s", flush=True)
            both = seen["batching"].keys() & seen["one at a time"].keys()
            same &= all(seen["batching"][key] == seen["one at a time"][key] for key in both)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    fast, slow = (statistics.median(speeds[name]) for name in servers)
    print(f"\n{args.clients} clients, {args.seconds:g} s per run, n {args.n}, <= {args.max_tokens} tokens, "
          f"{args.threads} torch thread(s) per server, median of {args.runs}")
    print(f"continuous batching (--max-batch {args.max_batch}): {fast:,.0f} tokens/s")
    print(f"one request at a time (--max-batch 1): {slow:,.0f} tokens/s")
    pairs = ", ".join(f"{a / b:.2f}x" for a, b in zip(*speeds.values()))
    print(f"ratio: {fast / slow:.2f}x (run by run: {pairs}); the same tokens for the same request from both "
          f"servers: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()

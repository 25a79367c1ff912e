"""Real runs for the run page's tests, written with the run store's own writer (RunStore.create, log_*).

Every number follows a formula a test can redo by hand:
- metrics at step s: reward = s/100, reward/accuracy = s/50 (capped at 1), reward/judge = 0.5 + s/200,
  kl = s/1000, kl_coef = 0.05, entropy = 2 - s/100, len_mean = 100 + s, trunc_rate = 0.1, ...;
- groups at step s: group 0 "what is 2+2?" (the same prompt every step) with rewards [0, s/STEPS, 1, 0.5];
  group 1 "zero variance" with rewards [1, 1, 1, 1]; group 2 with one truncated sample and rewards
  [0.25, 0.75, None, 0.25]; at the last step, group 0 sample 1 holds markup and a script (UNTRUSTED).
- samples carry a judge component with per-criterion sub_scores and a reason (JUDGE_REASON).
- evals every 10 steps (and step 0): pass@1 = 0.3 + s/100, compliance = 0.9, len_mean = 90 + s.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kitae.store import GroupRecord, RunStore, SampleRecord

STEPS = 30
SAME_PROMPT = "what is 2+2?"
UNTRUSTED = ('<script>window.__kitae_pwned = 1</script><img src=x onerror="window.__kitae_pwned = 2">'
             '<b>bold?</b> the answer is 4')
JUDGE_REASON = "states 4 and shows the addition"
CRITERIA = ("correctness", "clarity")


def metrics_at(step: int) -> dict[str, float]:
    return {
        "reward": step / 100,
        "reward/accuracy": min(1.0, step / 50),
        "reward/judge": 0.5 + step / 200,
        "kl": step / 1000,
        "kl_coef": 0.05,
        "entropy": 2 - step / 100,
        "clip_frac": 0.01,
        "len_mean": 100.0 + step,
        "trunc_rate": 0.1,
        "grader/judge/abstain_rate": 0.25,
        "grader/judge/error_rate": 0.0,
        "grader/judge/judge_tokens": 300.0 + step,
        "secs_per_step": 2.0,
        "loss": 0.1,
    }


def eval_at(step: int) -> dict[str, float]:
    return {"pass@1": 0.3 + step / 100, "compliance": 0.9, "len_mean": 90.0 + step}


def sample(text: str, reward: float | None, finish: str = "stop", advantage: float = 0.0) -> SampleRecord:
    judge = None if reward is None else reward
    return SampleRecord(
        text=text,
        completion_tokens=len(text.split()),
        finish_reason=finish,
        reward=reward,
        advantage=advantage,
        scores={"accuracy": None if reward is None else float(reward >= 0.5), "judge": judge},
        reasons={"accuracy": None, "judge": JUDGE_REASON if reward is not None else None},
        sub_scores={"judge": {c: judge for c in CRITERIA}} if reward is not None else {},
        errors={"accuracy": None, "judge": None if reward is not None else "judge timed out after 30 s"},
    )


def groups_at(step: int, steps: int = STEPS) -> list[GroupRecord]:
    last = step == steps
    same = [0.0, step / steps, 1.0, 0.5]
    texts = [f"step {step}: 2+2 is {i + 3}" for i in range(4)]
    if last:
        texts[1] = UNTRUSTED
    return [
        GroupRecord(SAME_PROMPT, [{"role": "user", "content": SAME_PROMPT}], "4", {"id": 0},
                    [sample(t, r, advantage=r - 0.5) for t, r in zip(texts, same)], 0),
        GroupRecord(f"zero variance {step}", [{"role": "user", "content": "zero"}], "1", {"id": 1},
                    [sample(f"yes {i}", 1.0) for i in range(4)], 1),
        GroupRecord(f"truncated {step}", [{"role": "user", "content": "long"}], None, {"id": 2},
                    [sample("a " * 20, 0.25, "length"), sample("b", 0.75), sample("c", None), sample("d", 0.25)], 2),
    ]


def log_step(store: RunStore, step: int, steps: int = STEPS) -> None:
    store.log_groups(step, groups_at(step, steps))
    store.log_metrics(step, metrics_at(step))
    if step % 10 == 0:
        store.log_eval(step, eval_at(step))


def finished_run(runs_dir: Path, name: str = "finished-run", steps: int = STEPS, status: str = "finished") -> Path:
    with RunStore.create(runs_dir / name, name=name, config={"lr": 1e-6, "group_size": 4}, model="tiny-llama") as store:
        store.log_eval(0, eval_at(0))
        for step in range(1, steps + 1):
            log_step(store, step, steps)
        store.finish(status)
    return runs_dir / name


class LiveRun:
    """A run that a thread keeps writing (one step every `every` seconds) while a test watches the page."""

    def __init__(self, runs_dir: Path, name: str = "live-run", steps: int = 1000, every: float = 0.2):
        self.path = runs_dir / name
        self.store = RunStore.create(self.path, name=name, config={"lr": 1e-6}, model="tiny-llama")
        self.steps, self.every = steps, every
        self.step = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)

    def log_until(self, step: int) -> None:
        while self.step < step:
            self.step += 1
            log_step(self.store, self.step, self.steps)

    def start(self) -> "LiveRun":
        self._thread.start()
        return self

    def _write(self) -> None:
        while not self._stop.is_set() and self.step < self.steps:
            self.log_until(self.step + 1)
            time.sleep(self.every)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.store.finish("finished")
        self.store.close()

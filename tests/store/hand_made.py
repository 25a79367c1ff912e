"""Small hand-made groups with known rewards for the run store tests, and the ``kitae runs`` commands in an app
of their own."""

from __future__ import annotations

import typer

from kitae.cli.runs import register
from kitae.store import GroupRecord, SampleRecord


def runs_app() -> typer.Typer:
    """The ``kitae runs`` commands in an app of their own, ``runs`` a sub-command as in the real ``kitae`` app."""
    app = typer.Typer()
    register(app)

    @app.callback()
    def root() -> None:  # keeps `runs` a sub-command
        pass

    return app


def make_sample(reward: float | None, finish_reason: str = "stop", text: str = "x") -> SampleRecord:
    return SampleRecord(
        text=text,
        completion_tokens=len(text),
        finish_reason=finish_reason,
        reward=reward,
        advantage=0.0 if reward is None else reward - 0.5,
        scores={"accuracy": reward, "format": 1.0},
        reasons={"accuracy": None, "format": "tags present"},
        sub_scores={"rubric": {"correct": reward, "polite": 1.0}},
        errors={"accuracy": None if reward is not None else "judge timed out"},
    )


def make_group(index: int, rewards: list[float | None], prompt: str | None = None, truncated: int = 0) -> GroupRecord:
    prompt = prompt if prompt is not None else f"question {index}"
    samples = [make_sample(r, "length" if i < truncated else "stop", f"answer {i}") for i, r in enumerate(rewards)]
    return GroupRecord(
        prompt=prompt,
        messages=[{"role": "user", "content": prompt}],
        reference=str(index),
        item={"id": index, "tags": ["math", "日本語"]},
        samples=samples,
        group_index=index,
    )

"""Image prompts for the vision tests: small pictures drawn here, and a run whose groups have images, written the
way the trainer writes one."""

from __future__ import annotations

import base64
from pathlib import Path

from PIL import Image, ImageDraw


def draw(path: Path, colour: str = "red", size: int = 48) -> Path:
    """A real PNG: one coloured square on white."""
    img = Image.new("RGB", (size, size), "white")
    ImageDraw.Draw(img).rectangle([size // 4, size // 4, 3 * size // 4, 3 * size // 4], fill=colour)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)
    return path


def data_url(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


# a question with markup in it: the run page must show it as text
MARKUP = '<img src=x onerror="window.__kitae_pwned = 1">what colour?'


def image_run(runs_dir: Path, name: str = "vision-run") -> Path:
    """One step, two groups: group 0 a red picture (its question holds markup), group 1 a text prompt."""
    from kitae.data.loader import validate_row
    from kitae.store import GroupRecord, RunStore, SampleRecord
    from kitae.store.images import RunImages

    pic = draw(runs_dir.parent / "data" / "red.png")
    row = validate_row({"messages": [{"role": "user", "content": [{"type": "image", "image": str(pic)},
                                                                  {"type": "text", "text": MARKUP}]}],
                        "reference_answer": "red"}, "rows.jsonl", 1)
    messages, names = RunImages(runs_dir / name).stored_row(row["messages"], row["images"])
    samples = [SampleRecord(t, 2, "stop", r, r - 0.5) for t, r in (("red<|im_end|>", 1.0), ("blue", 0.0))]
    with RunStore.create(runs_dir / name, name=name, config={}, model="kitae-tiny-vl") as store:
        store.log_groups(1, [GroupRecord("[image] " + MARKUP, messages, "red", {"images": names}, samples, 0),
                             GroupRecord("2+2?", [{"role": "user", "content": "2+2?"}], "4", {}, samples, 1)])
        store.log_metrics(1, {"reward": 0.5})
        store.finish("finished")
    return runs_dir / name

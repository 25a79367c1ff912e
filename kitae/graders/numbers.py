"""Reading the numbers a text states, with their units normalized (the hosted RFT grader guide's numeric grader).

    >>> [q.value for q in extract_quantities("WACC ≈ 9.91%, EV ≈ $1,705M")]
    [9.91, 1705000000.0]
    >>> [q.value for q in extract_quantities("売上は1億2000万円、前年比３割増")]
    [120000000.0, 30.0]
    >>> [q.value for q in extract_quantities("6.02 × 10²³ and 1.5E+06 and (1,200)")]
    [6.02e+23, 1500000.0, -1200.0]
    >>> [q.value for q in key_numbers("On March 5, 2024 one of the 3rd-shift lines made 1/4 of output")]
    [0.25]

What is normalized: NFKC (full-width digits and signs); digit grouping and decimal marks (below); scientific
notation (``1.5e6``, ``1.5E+06``, ``6.02 x 10^23``, ``6.02×10^23``, ``6.02 × 10²³``, ``10^6``); scale words
and suffixes K/M/B/T (attached: ``5K``, ``1.7B``), thousand/million/billion/trillion, mn/bn/tn, 千/万/億/兆
and their compounds (``1億2000万``, ``3千万``, ``1.5億``); percent (``%``, percent, パーセント; 割 = 10%, and after it 分 = 1% and 厘 = 0.1%: ``二割五分`` is 25%): a
percentage keeps its number (9.91% reads 9.91, marked as a percent); currency signs and words ($, ¥, €, £,
USD, JPY, 円, ドル, yen, dollars) are dropped; negatives (``-5``, ``▲5``, and accounting parentheses
``(1,200)``, ``($1.5M)``: a grouped number or an amount with a currency sign, not a percentage, so ``(3)`` and
``(2019)`` stay positive); fractions (``1/4`` reads 0.25, ``3/4 of``, ``½``, ``4分の1``, ``四分の三``; up to
three digits over up to four, so ``2023/24`` stays two numbers); kanji numerals (``三千五百万``, ``二十``,
``百二十``, ``二〇二四``, 〇 and 零) where practical: runs of two or more numeral characters, or one followed by
a counter (円, 人, 年, 冊, 本, つ, ...), so words such as 一般, 統一 or 十分 stay words; English number words (``twenty``,
``twenty-five``, ``one hundred and twelve``, ``two million``, ``two and a half million``, ``a half``, ``two thirds``; ordinal words such
as ``third`` stay words, see :mod:`kitae.graders.number_words`).

Digit grouping and decimal marks, read as most writers mean them:
- ``1,234,567.5``: comma groups of three, point decimal (English); ``1,234`` is 1234.
- ``1.234.567`` and ``1.234,56``: point groups (two or more, or one before a decimal comma); ``1.234`` alone
  is 1.234.
- ``1 234 567`` and ``1 234,5``: space groups of three (also thin and no-break spaces), so numbers listed
  with single spaces (``100 200 300``) read as one; list them with commas or words.
- ``1'250'000`` and ``1’250’000.50``: apostrophe groups (Swiss).
- ``9,91`` and ``3,5``: a single comma followed by other than three digits is a decimal comma; ``1,2,3`` is
  three numbers.

A plain four-digit number from 1900 to 2099 without unit, sign or grouping (``2024``, ``2024年``, ``in 2024``)
is marked as a year (:attr:`Quantity.year`); the numeric grader leaves years out of the key numbers unless
the reference has no other number. An English number word with nothing attached (``one of``, ``two
plants``) is prose, marked :attr:`Quantity.in_words` and not a key number unless the reference has no number in digits
(a reference ``twenty`` asks for 20); with a percent, scale or
currency (``twenty percent``, ``two million``, ``five dollars``) it is an amount like any other. A sample's
number words are all read, so ``twenty`` matches a reference's 20 (see :func:`key_numbers`).

What is not a number at all (blanked out on both sides; the guide's key numbers are decimals, percentages and
amounts, and these are none of them):
- list numbering at the start of a line (``1.``, ``2)``, ``(3)``) and circled numbers (①);
- ordinals: ``3rd``, ``21st``, ``2nd-quarter``, 第3, ``3位``, ``2番目``, ``3回目``, ``No. 1``, ``#3``, and the
  quarter and half-year labels ``3Q`` and ``1H``. An ordinal names a position, not a quantity, so a
  reference whose only number is an ordinal ("She finished 3rd") has no key number and is skipped: check a
  rank with ``string_check`` or the judge;
- dates: 2024-03-15, 2024/3/15, 2024.3.15, 2024年3月5日, 3月5日, 2024年3月期, 令和6年, ``March 5, 2024``,
  ``Mar. 5th``, ``March 5–7``, ``5 March 2024``, ``the 5th of March``, ``3/5/2024``, ``3/5/24``, ``05.03.2024``,
  ``3/2024``. ``March 2024`` keeps its year (a year, as above); a month and day in digits without a year
  (``3/15``) reads as a fraction, so write such dates with the year or the month's name;
- clock times: ``10:30``, ``3:30 PM``, ``3 p.m.``, ``10am``, ``7 o'clock``, 午後3時半, 15時30分 (durations
  are counts: ``3時間``, ``3ヶ月``);
- phone numbers with eight or more digits: ``555-123-4567``, ``(555) 123-4567``, ``+1 (555) 123-4567``,
  ``1-800-555-1234``, ``03-1234-5678``, ``+81 3-1234-5678``;
- version numbers and addresses: ``v2.4.1``, ``version 3.12``, ``バージョン2``, a number after a common
  software name (``Python 3.12``, ``CUDA 12.1``, ``iOS 17``), and three or more dotted parts (``2.4.1``,
  ``192.168.0.1``; point groups such as ``1.234.567`` stay numbers). A bare ``3.12`` is a decimal;
- numbers inside identifiers (Q3, GPT-4, H2O) and the power of a unit (``m/s^2``, ``cm^{2}``, ``m**3``; ``m/s²``
  too), so ``15 m/s^2`` states one number.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

from kitae.graders.number_words import spell_out

_NUMBER = (
    r"(?<![\d/.,])(?P<fraction>\d{1,3}/[1-9]\d{0,3})(?![\d/])"  # 1/4, 3/4 (not 2023/24, not 1/2/3)
    r"|(?P<apostrophes>\d{1,3}(?:['’]\d{3})+(?:\.\d+)?)(?!\d)"  # 1'250'000 (Swiss)
    r"|(?P<dots>\d{1,3}(?:\.\d{3}){2,}(?:,\d+)?|\d{1,3}(?:\.\d{3})+,\d+)(?!\d)"  # 1.234.567, 1.234,56
    r"|(?P<commas>\d{1,3}(?:,\d{3})+(?:\.\d+)?)(?!\d)"  # 1,234,567.5
    r"|(?P<spaces>\d{1,3}(?: \d{3})+(?:[.,]\d+)?)(?!\d)"  # 1 234 567 (after NFKC: no-break spaces too)
    r"|(?<!\d,)(?P<decimal_comma>\d+,\d{1,2}|\d{1,3},\d{4,})(?!\d|,\d)"  # 9,91, 3,14159 (not 1,234 nor 1,2,3)
    r"|(?P<plain>\d+(?:\.\d+)?(?:[eE][-+−]?\d+)?)"  # 42, 3.14, 1.5e6, 1.5E+06
)
_NUMBER_RE = re.compile(rf"(?=\d)(?:{_NUMBER})")  # the lookahead: a quick "no" where no digit starts
_KINDS = ("fraction", "apostrophes", "dots", "commas", "spaces", "decimal_comma", "plain")
_GROUPED = ("apostrophes", "dots", "commas", "spaces")
# 6.02 x 10^23, 6.02×10^23, 6.02 * 10**23, 6.02 \times 10^{23} (10²³ is rewritten to 10^23 before NFKC)
_TIMES_TEN = re.compile(r"\s?(?:[xX×*·⋅]|\\times|\\cdot)\s?10\s?(?:\^|\*\*)\s?\{?(?P<exp>[-+−]?\d+)\}?")
_POWER = re.compile(r"\s?(?:\^|\*\*)\s?\{?(?P<exp>[-+−]?\d+)\}?")  # after a bare 10: 10^6
_SUPERSCRIPT_POWER = re.compile(r"(?<=10)[⁺⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+")
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")
_YEAR = re.compile(r"(?:19|20)\d\d")
_COUNTED = re.compile(r"\s?[円ドル倍人個件回歳台社名本枚]")  # 2000人 is a count, 2024年 a year
_EN_SCALE = {"k": 1e3, "thousand": 1e3, "m": 1e6, "mn": 1e6, "million": 1e6, "b": 1e9, "bn": 1e9,
             "billion": 1e9, "t": 1e12, "tn": 1e12, "trillion": 1e12}
# Single letters only when attached (5K, 1.7B); words may follow one space. Not followed by a letter (5km).
_EN_SUFFIX = re.compile(r"(?:(?P<letter>[kKMBT])|\s?(?P<word>thousand|million|billion|trillion|mn|bn|tn))(?![A-Za-z])")
_JA_SMALL = {"十": 10, "百": 100, "千": 1000}
_JA_BIG = {"万": 1e4, "億": 1e8, "兆": 1e12}
_JA_SUFFIX = re.compile(r"(?P<small>[十百千])?(?P<big>[万億兆])?")
_JA_CONTINUE = re.compile(rf"(?P<num>{_NUMBER})(?P<small>[十百千])?(?P<big>[万億兆])?")
_PERCENT = re.compile(r"\s?(?P<pct>%|percent|per cent|パーセント)|(?P<wari>割)")
_PREFIX = re.compile(
    r"(?P<neg>[-−]|[▲△]\s?)?(?P<cur>US\$|[$¥€£]|(?:USD|JPY|EUR|GBP|CNY)\s?)?(?P<neg2>[-−])?$"
)
_IDENTIFIER_BEFORE = re.compile(r"[A-Za-z_](?:-|\^\{?|\*\*)?$")  # GPT-4, and a unit's power: m/s^2, cm^{2}, m**3

_LIST_MARKER = re.compile(r"^([ \t>*#•・-]*)(?:\(\d{1,3}\)|\d{1,3}[.)、:])(?=\s|$)", re.M)
# What is not a key number (the module docstring), blanked in this order: a date before a phone number
# (2024-03-15), a phone number before a version (555.123.4567), everything before an ordinal (March 5th).
_MONTH = (r"\b(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
          r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?(?![A-Za-z])")
_DAY = r"\d{1,2}(?:st|nd|rd|th)?(?!\d)"
_AND_YEAR = r"(?:,?\s(?:19|20)\d\d(?!\d))?"
_DATE = re.compile(  # each pattern starts with a lookahead at its first character: 4x faster
    r"(?=[\dJFMASOND令平昭大明])(?:"
    r"(?<!\d)\d{4}[-/.年]\d{1,2}[-/.月]\d{1,2}日?"  # 2024-03-15, 2024/3/15, 2024.3.15, 2024年3月15日
    r"|(?<![\d.])(?:\d{4}年\s?)?\d{1,2}月(?:\s?\d{1,2}日)?"  # 3月5日, 2024年3月 (3ヶ月 is a duration)
    r"|(?:令和|平成|昭和|大正|明治)\s?(?:\d{1,2}|元)年"  # 令和6年
    rf"|{_MONTH}\s{_DAY}(?:\s?[-–]\s?{_DAY})?{_AND_YEAR}"  # March 5, 2024; Mar. 5th; March 5–7
    rf"|(?<![\d.,]){_DAY}\s(?:of\s)?{_MONTH}{_AND_YEAR}"  # 5 March 2024, 5th of March
    r"|(?<![\d/.,-])\d{1,2}(?P<sep>[/.-])\d{1,2}(?P=sep)\d{4}(?![\d/.-])"  # 3/5/2024, 05.03.2024, 3-5-2024
    r"|(?<![\d/.,-])\d{1,2}/\d{1,2}/\d{2}(?![\d/])"  # 3/5/24
    r"|(?<![\d/.,])(?:0?[1-9]|1[0-2])/(?:19|20)\d\d(?![\d/])"  # 3/2024: a month
    r")"
)
_TIME = re.compile(
    r"(?=[\d午])(?:"
    r"(?<![\d.])\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp]\.?\s?[Mm]\.?(?![A-Za-z]))?(?!\d)"  # 10:30, 3:30 PM
    r"|(?<![\d.,])\d{1,2}\s?(?:[AaPp]\.\s?[Mm]\.?|[AaPp][Mm])(?![A-Za-z])"  # 3 p.m., 10am
    r"|(?<![\d.,])\d{1,2}\s?o['’]clock"
    r"|(?:午前|午後)?\s?(?<![\d.])\d{1,2}時(?!間)(?:\s?\d{1,2}分|半)?(?:\s?\d{1,2}秒)?"  # 午後3時半 (3時間: hours)
    r")"
)
_PHONE = re.compile(  # with at least 8 digits (_blank_phone): +1 234 567 is a number
    r"(?=[+(\d])(?:"
    r"(?<![A-Za-z0-9_+.,/-])\+\d{1,3}(?:[\s.-]?\(\d{1,4}\))?(?:[\s.-]\d{1,4}){2,4}(?!\d)"  # +81 3-1234-5678
    r"|(?<![A-Za-z0-9_.,/-])\(\d{2,4}\)\s?\d{2,4}[\s.-]\d{3,4}(?!\d)"  # (555) 123-4567
    r"|(?<![A-Za-z0-9_.,/-])(?:1[.-])?\d{2,4}(?P<sep>[.-])\d{2,4}(?P=sep)\d{3,4}(?![\d.-])"  # 555-123-4567
    r")"
)
_SOFTWARE = ("Python|Node(?:\\.js)?|Java|CUDA|iOS|iPadOS|macOS|Android|Ubuntu|Debian|Windows|PyTorch|TensorFlow"
             "|Chrome|Firefox|Ruby|Rust|PHP|Perl|Kotlin|Django|Rails|Linux|Kubernetes|PostgreSQL|MySQL")
_VERSION = re.compile(
    r"(?=[VvバPNJCiamAUDWTFRKLM\d])(?:"
    r"(?:\b(?:[Vv]ersion|VERSION|[Vv]er\.)|バージョン|\b[Vv](?=\d))\s?\d+(?:\.\d+)*"  # version 3.12, v2.4.1
    rf"|\b(?:{_SOFTWARE})\s?\d+(?:\.\d+)*(?![\d%])"  # Python 3.12, CUDA 12.1
    r"|(?<![\d.,])\d+(?:\.\d+){2,}(?!\d|\.\d)"  # 2.4.1, 192.168.0.1 (not point groups: _blank_version)
    r")"
)
_POINT_GROUPS = re.compile(r"\d{1,3}(?:\.\d{3})+")
_ORDINAL = re.compile(
    r"(?=[第\dN#])(?:"
    r"第\s?\d+"  # 第3四半期
    r"|(?<![\d.,])\d+(?:st|nd|rd|th|ST|ND|RD|TH)(?![A-Za-z])"  # 3rd, 2nd-quarter, 21st
    r"|(?<![A-Za-z\d.,])(?:[1-4]Q|[12]H)(?![A-Za-z])"  # 3Q, 1H: a quarter, a half year (Q3 is a name)
    r"|(?<![\d.,])\d+\s?(?:位|番目|番手|回目|度目|着)"  # 3位, 2番目, 3回目
    r"|\bNo\.\s?\d+|(?<![A-Za-z0-9_&])#\d+"  # No. 1, #3
    r")"
)
_JA_NUMERALS = "0-9〇零一二三四五六七八九十百千"
_JA_FRACTION = re.compile(  # the lookbehind starts it at the start of a run only: linear time on long digit runs
    rf"(?<![{_JA_NUMERALS}])(?P<den>[{_JA_NUMERALS}]+)\s?分の\s?(?P<num>[{_JA_NUMERALS}]+)")
_JA_DIGIT = "0-9〇零一二三四五六七八九"
# 二割五分 is 25%: 割 = 10%, 分 = 1%, 厘 = 0.1% (a 分 or 厘 counts only after a 割: 5分 alone is 5 minutes)
_WARI = re.compile(rf"(?<![{_JA_NUMERALS}])(?P<wari>[{_JA_DIGIT}]{{1,2}}|十)割"
                   rf"(?:\s?(?P<bu>[{_JA_DIGIT}])分)?(?:\s?(?P<rin>[{_JA_DIGIT}])厘)?")
_WORD_CURRENCY = re.compile(r"\s?(?:dollars?|yen|euros?|pounds?|円|ドル)(?![A-Za-z])", re.I)  # five dollars
_CIRCLED = re.compile(r"[\u2460-\u24ff\u2776-\u2793\u3251-\u325f\u32b1-\u32bf]")

_KANJI_DIGITS = {c: i for i, c in enumerate("〇一二三四五六七八九")} | {"零": 0}
_KANJI_RUN = re.compile(r"[〇零一二三四五六七八九十百千万億兆]+")
_COUNTERS = "円ドル%パーセント割倍人個件回年歳万億兆冊本枚台匹頭羽名社軒隻点歩箇ヶカつ"  # not 分: 十分 is "enough"
_LONGEST_KANJI_NUMERAL = 30  # 九千九百九十九兆九千九百九十九億... is 24 characters


@dataclass(frozen=True)
class Quantity:
    """A number as stated: ``value`` has scale words applied; percentages keep their number."""

    value: float
    text: str
    percent: bool = False
    year: bool = False  # a plain 1900-2099 (see the module docstring)
    in_words: bool = False  # an English number word alone ("one of", "two reasons"): a count in prose


def extract_quantities(text: str) -> list[Quantity]:
    """The numbers ``text`` states, in order (the module docstring says what counts; :func:`key_numbers` picks
    those of a reference that the numeric grader checks)."""
    prepared, spelled = _prepare(text)
    found, consumed = [], 0
    for m in _NUMBER_RE.finditer(prepared):
        if m.start() < consumed:
            continue
        q, end = _read_quantity(prepared, m, spelled.get(m.start()) is False)
        consumed = end
        if q is not None:
            found.append(q)
    return found


def key_numbers(reference: str) -> list[Quantity]:
    """The numbers of a reference that the numeric grader checks: each value once; no number word alone
    (``one of``) unless the reference has no number in digits (``twenty``), and no year unless the reference
    has no other number (``Founded in 1998.``)."""
    seen, stated = set(), []
    for q in extract_quantities(reference):
        if (q.value, q.percent) not in seen:
            seen.add((q.value, q.percent))
            stated.append(q)
    amounts = [q for q in stated if not q.year]
    return [q for q in amounts if not q.in_words] or amounts or stated


def prepare(text: str) -> str:
    """NFKC, number words as digits, and non-key numbers (list markers, dates, ...) blanked out."""
    return _prepare(text)[0]


def _prepare(text: str) -> tuple[str, dict[int, bool]]:
    """The prepared text, and where it has numbers written in words (see number_words.spell_out)."""
    text = _CIRCLED.sub(" ", str(text))
    text = _SUPERSCRIPT_POWER.sub(lambda m: "^" + m.group().translate(_SUPERSCRIPTS), text)  # NFKC: 10²³ -> 1023
    text = unicodedata.normalize("NFKC", text).replace("⁄", "/")  # NFKC: ½ -> 1⁄2 (fraction slash)
    text = _JA_FRACTION.sub(_ja_fraction, text)
    text = _WARI.sub(_wari_as_percent, text)
    text = _KANJI_RUN.sub(_kanji_replacement, text)
    text = _DATE.sub(" ", text)
    text = _TIME.sub(" ", text)
    text = _PHONE.sub(_blank_phone, text)  # before list markers: (555) 123-4567 is no item (555)
    text = _LIST_MARKER.sub(lambda m: m.group(1) + " ", text)
    text = _VERSION.sub(_blank_version, text)
    text = _ORDINAL.sub(" ", text)
    return spell_out(text)


def _blank_phone(m: re.Match) -> str:
    return " " if sum(c.isdigit() for c in m.group()) >= 8 else m.group()


def _blank_version(m: re.Match) -> str:
    return m.group() if _POINT_GROUPS.fullmatch(m.group()) else " "


def _read_quantity(text: str, m: re.Match, spelled: bool = False) -> tuple[Quantity | None, int]:
    start, end = m.start(), m.end()
    value, end = _apply_power(text, m, parse_number(m.group(), m.lastgroup))
    value, end = _apply_scale(text, end, value)
    percent = False
    pm = _PERCENT.match(text, end)
    if pm:
        percent, end = True, pm.end()
        value *= 10 if pm.group("wari") else 1
    prefix = _PREFIX.search(text, max(0, start - 8), start)
    lead = start - len(prefix.group()) if prefix else start
    if _IDENTIFIER_BEFORE.search(text[max(0, lead - 3) : lead] if not (prefix and prefix.group("cur")) else ""):
        return None, end  # Q3, GPT-4, H2O: part of a name, not a stated number
    if not math.isfinite(value):
        return None, end  # 1e999: not a number anyone states
    if prefix and (prefix.group("neg") or prefix.group("neg2")):
        if _hyphen_between(text, lead, prefix):
            lead += 1
        else:
            value = -value
    elif not percent and text[lead - 1 : lead] == "(" and text[end : end + 1] == ")" and (
            m.lastgroup in _GROUPED or (prefix and prefix.group("cur"))):
        value, lead, end = -value, lead - 1, end + 1  # accounting negative: (1,200), ($1.5M)
    bare = end == m.end() and lead == start
    year = bare and m.lastgroup == "plain" and _YEAR.fullmatch(m.group()) is not None and not _COUNTED.match(text, end)
    in_words = spelled and bare and not _WORD_CURRENCY.match(text, end)
    return Quantity(value=value, text=text[lead:end].strip(), percent=percent, year=year, in_words=in_words), end


def parse_number(token: str, kind: str | None = None) -> float:
    """The value of one number as matched by ``_NUMBER``; ``kind`` is the alternative that matched it."""
    kind = kind or _NUMBER_RE.fullmatch(token).lastgroup
    if kind == "fraction":
        numerator, denominator = token.split("/")
        return int(numerator) / int(denominator)
    if kind == "apostrophes":
        token = token.replace("'", "").replace("’", "")
    elif kind == "dots":
        token = token.replace(".", "").replace(",", ".")
    elif kind == "commas":
        token = token.replace(",", "")
    elif kind == "spaces":
        token = token.replace(" ", "").replace(",", ".")
    elif kind == "decimal_comma":
        token = token.replace(",", ".")
    return float(token.replace("−", "-"))


def _apply_power(text: str, m: re.Match, value: float) -> tuple[float, int]:
    """``6.02 x 10^23`` (mantissa times a power of ten) and a bare ``10^6``."""
    power = _TIMES_TEN.match(text, m.end())
    if power is None and m.group() == "10":
        power = _POWER.match(text, m.end())
        value = 1.0 if power else value
    if power is None:
        return value, m.end()
    exponent = int(power.group("exp").replace("−", "-"))
    return float(f"{value!r}e{exponent}"), power.end()  # not value * 10.0**exponent: that overflows past 308


def _hyphen_between(text: str, lead: int, prefix: re.Match) -> bool:
    """A '-' right after a digit is a range (2020-2021), not a minus sign."""
    sign = prefix.group("neg") or prefix.group("neg2")
    return sign in "-−" and lead > 0 and text[lead - 1].isdigit()


def _apply_scale(text: str, end: int, value: float) -> tuple[float, int]:
    en = _EN_SUFFIX.match(text, end)
    if en:
        word = (en.group("letter") or en.group("word")).lower()
        return value * _EN_SCALE[word], en.end()
    ja = _JA_SUFFIX.match(text, end)
    if not ja.group():
        return value, end
    value *= _JA_SMALL.get(ja.group("small"), 1) * _JA_BIG.get(ja.group("big"), 1)
    last_big = _JA_BIG.get(ja.group("big"))
    end = ja.end()
    while last_big:  # 1億2000万, 1万5000: each further part is smaller than the last big unit
        more = _JA_CONTINUE.match(text, end)
        if not more:
            break
        big = _JA_BIG.get(more.group("big"))
        if big is not None and big >= last_big:
            break
        kind = next(k for k in _KINDS if more.group(k) is not None)
        part = parse_number(more.group("num"), kind) * _JA_SMALL.get(more.group("small"), 1) * (big or 1)
        value, end, last_big = value + part, more.end(), big
    return value, end


# ---- kanji numerals ------------------------------------------------------------------------------
def _ja_fraction(m: re.Match) -> str:
    """4分の1 -> 1/4, 四分の三 -> 3/4 (read as a fraction by _NUMBER)."""
    den, num = (int(g) if g.isdigit() else kanji_to_int(g) for g in (m.group("den"), m.group("num")))
    return f"{num}/{den}" if den else m.group()


def _wari_as_percent(m: re.Match) -> str:
    """二割五分 -> 25%, 3割2分5厘 -> 32.5% (read as a percentage by _PERCENT)."""
    tenths, hundredths, thousandths = (_ja_digits(m.group(g)) for g in ("wari", "bu", "rin"))
    return f"{tenths * 10 + hundredths + thousandths / 10:g}%"


def _ja_digits(run: str | None) -> int:
    return 0 if run is None else int(run) if run.isdigit() else kanji_to_int(run)


def _kanji_replacement(m: re.Match) -> str:
    run = m.group()
    lead = len(run) - len(run.lstrip("万億兆"))
    body = run[lead:]
    after = m.string[m.end() : m.end() + 1]
    if m.start() > 0 and m.string[m.start() - 1].isdigit():
        return run  # 3千万: a scale suffix of an arabic number, read later
    if not body or (len(body) == 1 and (not after or after not in _COUNTERS)):
        return run
    if len(body) > _LONGEST_KANJI_NUMERAL:
        return run  # 一一一... thousands long: no number anyone writes (and past int()'s 4300-digit limit)
    return run[:lead] + str(kanji_to_int(body))


def kanji_to_int(run: str) -> int:
    """三千五百万 -> 35000000, 二十 -> 20, 二〇二四 -> 2024."""
    if not any(c in _JA_SMALL or c in _JA_BIG for c in run):
        return int("".join(str(_KANJI_DIGITS[c]) for c in run))
    total, section, digit = 0, 0, None
    for c in run:
        if c in _KANJI_DIGITS:
            digit = _KANJI_DIGITS[c] if digit is None else digit * 10 + _KANJI_DIGITS[c]
        elif c in _JA_SMALL:
            section += (1 if digit is None else digit) * _JA_SMALL[c]
            digit = None
        else:
            section += digit or 0
            total += (section or 1) * int(_JA_BIG[c])
            section, digit = 0, None
    return total + section + (digit or 0)

"""``format``: find multiple-choice, true/false and proof prompts (English and Japanese rules) and drop or tag them.

Kimi k1.5 §2.1 excludes these from the RL prompt set: a multiple-choice or true/false answer can be guessed
(a right answer after wrong reasoning still earns the reward), and a proof has no short answer to verify.

A rule is a list of regular expressions, matched (``re.search``, case-insensitive, multiline) against the
NFKC-normalized user turns, so full-width ``（Ａ）`` reads as ``(A)`` (and against the turns as written). Built-in rules:

    multiple_choice   "Which of the following", lettered options (A) ... (B), 次のうち, 選択肢, 記号で答え, ①…②
    true_false        "True or false", "yes or no", 正しいか誤りか, ○か×, 「はい」か「いいえ」, 正誤
    proof             "Prove that", "Show that", 証明せよ, ことを示せ

Configure with ``rules`` (add a rule or replace a built-in one by name), ``disable`` (names) and ``action``
(``drop`` or ``tag``; per rule too)::

    format:
      action: drop
      disable: [true_false]
      rules:
        fill_in_blank: {patterns: ["_{3,}", "空欄"], action: tag}

A tagged row keeps its place and gets ``format_tags: [rule, ...]``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Literal

from kitae.curate.report import StepReport, Table
from kitae.curate.step import Context, Dropped, Step, StepResult
from kitae.curate.text import prompt_text, row_lang
from kitae.errors import ConfigError
from kitae.registry import Registry

Action = Literal["drop", "tag"]
_OPTION = r"(?:\(\s*{l}\s*\)|(?<![A-Za-z]){l}[\).:](?=\s))"  # (A)  A)  A.  A:  (any case)


def _options(a: str, b: str) -> str:
    """Two consecutive option labels, e.g. (A) ... (B), in one text."""
    return _OPTION.format(l=a) + r"[\s\S]*?" + _OPTION.format(l=b)


BUILTIN_RULES: dict[str, list[str]] = {
    "multiple_choice": [
        r"\bwhich of the (following|these|options)\b",
        r"\b(choose|select|pick) (the|one|all|from)\b[^.?!\n]*\b(options?|choices?|answers?|following)\b",
        r"\b(answer )?(choices|options)\s*:",
        _options("A", "B"),
        r"次のうち", r"次の中から", r"選択肢", r"(選びなさい|選べ|選んでください|選んで下さい)", r"記号で答え",
        r"[(]\s*[アイウエ]\s*[)][\s\S]*[(]\s*[イウエオ]\s*[)]", r"[①-⑳][\s\S]*[②-⑳]",
    ],
    "true_false": [
        r"\btrue or false\b", r"\btrue\s*/\s*false\b", r"\bT\s*/\s*F\b",
        r"\b(answer|respond|reply) (with )?[\"']?yes[\"']? or [\"']?no\b",
        r"\byes or no\b[?:]", r"\bis (the following|this) statement (true|correct)\b",
        r"正しいか(誤り|間違い|誤っている|間違っている)か", r"正誤", r"[○〇◯]か[×✕]", r"[○〇◯]\s*[×✕]で答え",
        r"「はい」か「いいえ」", r"はいかいいえ",
    ],
    "proof": [
        r"\bprove\b", r"\bshow that\b", r"\b(give|write) a proof\b", r"\bdemonstrate that\b",
        r"証明(せよ|しなさい|してください|して下さい|を(書|示|与)|の問題)", r"ことを示せ", r"ことを示しなさい", r"ことを示して", r"を示せ[。．]?$",
    ],
}

FORMAT_RULES = Registry("format rule")
for _name, _patterns in BUILTIN_RULES.items():
    FORMAT_RULES.register(_name, _patterns)


@dataclass
class RuleConfig:
    patterns: list[str] = field(default_factory=list)
    action: Action | None = None


@dataclass
class FormatConfig:
    action: Action = "drop"
    disable: list[str] = field(default_factory=list)
    rules: dict[str, RuleConfig] = field(default_factory=dict)

    def validate(self, path: str) -> None:
        for i, name in enumerate(self.disable):
            if name not in FORMAT_RULES and name not in self.rules:
                FORMAT_RULES.get(name, f"{path}.disable[{i}]" if path else f"disable[{i}]")


@dataclass
class Rule:
    name: str
    patterns: list[re.Pattern]
    action: str

    def match(self, text: str) -> str | None:
        """The matched snippet of the first pattern that hits, or None."""
        for p in self.patterns:
            m = p.search(text)
            if m:
                return m.group(0)
        return None


def build_rules(cfg: FormatConfig, path: str = "format") -> list[Rule]:
    specs = {name: RuleConfig(FORMAT_RULES.get(name)) for name in FORMAT_RULES.names()}
    specs.update(cfg.rules)
    rules = []
    for name, spec in specs.items():
        if name in cfg.disable:
            continue
        compiled = []
        for i, pattern in enumerate(spec.patterns):
            try:
                compiled.append(re.compile(pattern, re.IGNORECASE | re.MULTILINE))
            except re.error as exc:
                where = f"{path}.rules.{name}.patterns[{i}]"
                raise ConfigError(where, f"not a valid regular expression: {exc}") from None
        rules.append(Rule(name, compiled, spec.action or cfg.action))
    return rules


def classify(text: str, rules: list[Rule]) -> dict[str, str]:
    """Rule name -> the snippet that matched, for every rule that matches the text or its NFKC form
    (NFKC turns ① into 1, so circled numbers are matched in the text as written)."""
    forms = (unicodedata.normalize("NFKC", text), text)
    out = {}
    for rule in rules:
        hit = next((h for f in forms if (h := rule.match(f)) is not None), None)
        if hit is not None:
            out[rule.name] = hit
    return out


def run_format(rows: list[dict], cfg: FormatConfig, ctx: Context) -> StepResult:
    rules = build_rules(cfg)
    actions = {r.name: r.action for r in rules}
    report = StepReport("format", rows_in=len(rows))
    kept, dropped = [], []
    per_rule = {r.name: {"en": 0, "ja": 0} for r in rules}
    for i, row in enumerate(rows):
        hits = classify(prompt_text(row), rules)
        for name in hits:
            per_rule[name][row_lang(row) if row_lang(row) in ("en", "ja") else "en"] += 1
        drop = [n for n in hits if actions[n] == "drop"]
        if drop:
            reason = f"format: {drop[0]}"
            report.drop(reason)
            dropped.append(Dropped(row, reason, {"row": i + 1, "matched": hits}))
            report.examples.append({"rule": drop[0], "matched": hits[drop[0]], "text": prompt_text(row)})
            continue
        tags = [n for n in hits if actions[n] == "tag"]
        if tags:
            row = {**row, "format_tags": tags}
            for t in tags:
                report.tag(t)
        kept.append(row)
    report.rows_out = len(kept)
    report.tables.append(Table("matches by rule", ["rule", "action", "en", "ja"],
                               [[n, actions[n], c["en"], c["ja"]] for n, c in per_rule.items()]))
    return StepResult(kept, dropped, report)


STEP = Step("format", FormatConfig, run_format)

"""``balance``: tag prompts by domain and difficulty band, and resample to a target mix (Kimi k1.5 §2.1).

Kimi k1.5 asks for "diverse coverage" (prompts labelled by domain and discipline, balanced across them) and
"balanced difficulty" (easy, moderate and hard prompts, well distributed). Here:

- **domain**: a row field (``domain_field``) or the first of ``domain_rules`` (name -> regexes on the NFKC
  user turns) that matches, else ``general``. Built-in rules: ``arithmetic`` (``12+35``, ``7 minus 3``,
  ``たす``/``ひく`` with digits), ``math``, ``code``.
- **band**: from ``band_field``. A number (the ``pass_rate`` written by ``difficulty``) falls in the first band
  of ``band_max`` whose maximum it does not exceed (default hard <= 0.3 < medium <= 0.7 < easy); a string
  (such as the bundled data's ``difficulty: easy``) is its own band. Rows with no value are ``unknown``.
- **mix**: the target share of cell (domain d, band b) is ``domains[d] × bands[b]``, each normalized to sum
  to 1 over what exists (a band a domain has no rows in is left out of that domain's mix; the report lists
  such gaps); counts are rounded per domain first, then per band within it, so the domain mix holds exactly.
  Leave ``domains`` empty to keep the domains' current shares, ``bands`` empty to keep each domain's
  current band shares. A domain or band not named in a given mix gets no rows.
- **size**: the number of rows out. Default: the largest size that meets the mix without repeating a row.
  A larger size takes every row of the short cells and says so in the report, unless ``allow_repeat``
  samples them again (with replacement).

Rows out carry ``domain`` and ``band`` and keep their input order; sampling is seeded.
"""

from __future__ import annotations

import math
import random
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

from kitae.config import setting
from kitae.curate.report import StepReport, Table
from kitae.curate.step import Context, Dropped, Step, StepResult
from kitae.curate.text import prompt_text
from kitae.errors import ConfigError, DataError

BUILTIN_DOMAINS: dict[str, list[str]] = {
    "arithmetic": [r"\d+\s*[-+*/×÷]\s*\d+", r"\d+\s*(plus|minus|times|divided by)\s*\d+",
                   r"\d+\s*(たす|ひく|かける|わる)\s*\d+"],
    "math": [r"\b(equation|integral|derivative|probability|triangle|polynomial|prime|solve for)\b",
             r"(方程式|積分|微分|確率|三角形|多項式|素数|関数)"],
    "code": [r"```", r"\bdef \w+\(", r"\b(python|javascript|c\+\+|sql|function|program)\b", r"(プログラム|コード|関数を書)"],
}
DEFAULT_DOMAIN = "general"
UNKNOWN = "unknown"


@dataclass
class BalanceConfig:
    domain_field: str | None = None
    domain_rules: dict[str, list[str]] = field(default_factory=dict)
    domains: dict[str, float] = field(default_factory=dict)
    band_field: str = "pass_rate"
    band_max: dict[str, float] = field(default_factory=lambda: {"hard": 0.3, "medium": 0.7, "easy": 1.0})
    bands: dict[str, float] = field(default_factory=dict)
    size: int | None = setting(None, minimum=0)
    allow_repeat: bool = False
    seed: int = 0

    def validate(self, path: str) -> None:
        at = lambda k: f"{path}.{k}" if path else k  # noqa: E731
        for name in ("domains", "bands"):
            mix = getattr(self, name)
            for key, share in mix.items():
                if share < 0:
                    raise ConfigError(f"{at(name)}.{key}", f"a share is >= 0, got {share}")
            if mix and sum(mix.values()) <= 0:
                raise ConfigError(at(name), "the shares add up to 0; give at least one a positive share")


def compile_rules(rules: dict[str, list[str]], path: str) -> list[tuple[str, list[re.Pattern]]]:
    out = []
    for name, patterns in (rules or BUILTIN_DOMAINS).items():
        compiled = []
        for i, p in enumerate(patterns):
            try:
                compiled.append(re.compile(p, re.IGNORECASE))
            except re.error as exc:
                where = f"{path}.domain_rules.{name}[{i}]"
                raise ConfigError(where, f"not a valid regular expression: {exc}") from None
        out.append((name, compiled))
    return out


def domain_of(row: dict, cfg: BalanceConfig, rules: list, source: str, n: int) -> str:
    if cfg.domain_field:
        value = row.get(cfg.domain_field)
        if value is None:
            raise DataError(source, n, cfg.domain_field, "missing; balance reads each row's domain from it "
                            "(add it, or leave domain_field unset to classify by rules)")
        return str(value)
    text = unicodedata.normalize("NFKC", prompt_text(row))
    for name, patterns in rules:
        if any(p.search(text) for p in patterns):
            return name
    return DEFAULT_DOMAIN


def band_of(row: dict, cfg: BalanceConfig) -> str:
    value = row.get(cfg.band_field)
    if value is None:
        return UNKNOWN
    if isinstance(value, str):
        return value
    for name, top in cfg.band_max.items():
        if value <= top:
            return name
    return list(cfg.band_max)[-1]


def shares(mix: dict[str, float], counts: Counter) -> dict[str, float]:
    """The target mix normalized, or the current shares when no mix is given."""
    base = mix or counts
    total = sum(base.values())
    return {k: v / total for k, v in base.items()} if total else {}


@dataclass
class Mix:
    """The target: domain shares, and per domain its band shares."""

    domains: dict[str, float]
    bands: dict[str, dict[str, float]]

    def share(self, cell: tuple[str, str]) -> float:
        d, b = cell
        return self.domains.get(d, 0.0) * self.bands.get(d, {}).get(b, 0.0)

    def counts(self, size: int) -> dict[tuple[str, str], int]:
        """Rows per cell: domain totals first, then bands within each domain (largest remainder both times),
        so the domain mix holds exactly."""
        out = {}
        per_domain = largest_remainder(size, self.domains, sorted(self.domains))
        for d, total in per_domain.items():
            bands = self.bands[d]
            for b, k in largest_remainder(total, bands, sorted(bands)).items():
                out[(d, b)] = k
        return out


def target_mix(cells: Counter, cfg: BalanceConfig) -> Mix:
    """Domain shares, and per domain the shares of the target bands it has rows in.

    A target band a domain has no rows in is left out of that domain's mix (the others share its weight), and
    a domain left with no band gets no rows: the fact questions of the bundled task have only the ``fact``
    band, the arithmetic ones never do.
    """
    present: dict[str, Counter] = {}
    for (d, b), c in cells.items():
        present.setdefault(d, Counter())[b] += c
    p_band = {}
    for d, bands in present.items():
        wanted = {b: w for b, w in cfg.bands.items() if bands[b] > 0} if cfg.bands else dict(bands)
        if sum(wanted.values()) > 0:
            p_band[d] = shares(wanted, Counter())
    weights = cfg.domains or {d: sum(c.values()) for d, c in present.items()}
    p_domain = shares({d: w for d, w in weights.items() if d in p_band}, Counter())
    return Mix(p_domain, {d: p_band[d] for d in p_domain})


def absent(cells: Counter, cfg: BalanceConfig) -> list[str]:
    """Target domains and (domain, band) pairs that have no rows, for the report."""
    domains = {d for d, _ in cells}
    out = [d for d in cfg.domains if d not in domains]
    for d in sorted(domains if not cfg.domains else set(cfg.domains) & domains):
        out += [f"{d}/{b}" for b in cfg.bands if cells.get((d, b), 0) == 0]
    return out


def largest_remainder(total: int, fractions: dict, keys: list) -> dict:
    """Integer counts summing to `total`, proportional to `fractions` (Hamilton's method, ties by key order)."""
    exact = {k: total * fractions[k] for k in keys}
    counts = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(counts.values())
    for k in sorted(keys, key=lambda k: -(exact[k] - counts[k]))[:left]:
        counts[k] += 1
    return counts


def default_size(available: Counter, mix: Mix) -> int:
    """The largest size whose target counts fit in what is available (no row used twice)."""
    fits = [available[c] / mix.share(c) for c in _cells(mix) if mix.share(c) > 0]
    size = math.floor(min(fits)) if fits else 0
    while size > 0 and any(n > available[c] for c, n in mix.counts(size).items()):
        size -= 1
    return size


def _cells(mix: Mix) -> list[tuple[str, str]]:
    return [(d, b) for d in mix.domains for b in mix.bands[d]]


def run_balance(rows: list[dict], cfg: BalanceConfig, ctx: Context) -> StepResult:
    rules = compile_rules(cfg.domain_rules, "balance")
    tagged = [{**r, "domain": domain_of(r, cfg, rules, ctx.source, i + 1), "band": band_of(r, cfg)}
              for i, r in enumerate(rows)]
    cells = [(r["domain"], r["band"]) for r in tagged]
    available = Counter(cells)
    mix = target_mix(available, cfg)
    size = cfg.size if cfg.size is not None else (len(rows) if cfg.allow_repeat else default_size(available, mix))
    wanted = mix.counts(size) if mix.domains else {}
    target = {c: mix.share(c) for c in _cells(mix)}
    rng = random.Random(cfg.seed)
    chosen: list[int] = []
    for cell in sorted(wanted):
        members = [i for i, c in enumerate(cells) if c == cell]
        chosen += pick(members, wanted[cell], cfg.allow_repeat, rng)
    chosen.sort()
    return _result(tagged, cells, chosen, available, target, wanted, size, cfg)


def pick(members: list[int], k: int, repeat: bool, rng: random.Random) -> list[int]:
    if k <= len(members):
        return rng.sample(members, k)
    extra = rng.choices(members, k=k - len(members)) if repeat and members else []
    return members + extra


def _result(tagged, cells, chosen, available, target, wanted, size, cfg) -> StepResult:
    report = StepReport("balance", rows_in=len(tagged), rows_out=len(chosen))
    got = Counter(cells[i] for i in chosen)
    picked = set(chosen)
    dropped = []
    for i, row in enumerate(tagged):
        if i not in picked:
            reason = "not in the target mix" if target.get(cells[i], 0) == 0 else "over its target share"
            report.drop(reason)
            dropped.append(Dropped(row, reason, {"row": i + 1, "domain": cells[i][0], "band": cells[i][1]}))
    all_cells = sorted(set(available) | set(target))
    report.tables.append(Table(
        "mix (domain × band)", ["domain", "band", "available", "target share", "target", "out", "share out"],
        [[d, b, available.get((d, b), 0), target.get((d, b), 0.0), wanted.get((d, b), 0), got.get((d, b), 0),
          got.get((d, b), 0) / len(chosen) if chosen else 0.0] for d, b in all_cells],
    ))
    short = {f"{d}/{b}": wanted[(d, b)] - available[(d, b)] for d, b in wanted if wanted[(d, b)] > available[(d, b)]}
    report.stats = {"size": size, "seed": cfg.seed, "allow_repeat": cfg.allow_repeat,
                    "short cells": short if not cfg.allow_repeat else {},
                    "repeated rows": len(chosen) - len(picked), "no rows for": absent(available, cfg)}
    return StepResult([tagged[i] for i in chosen], dropped, report)


STEP = Step("balance", BalanceConfig, run_balance)

"""Write docs/config.md: every field of the training config with its default and the comment beside it in
its class (kitae/trainer/config.py and the sections beside the code that reads them), and for a field that names
a variant (a loss, an advantage estimator, a prompt sampler) each variant's settings. tests/test_config_reference.py
fails when the page and the code differ.

    python scripts/config_reference.py          # rewrite docs/config.md
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kitae.config import Variant, _variant_family  # noqa: E402
from kitae.trainer.config import TrainConfig  # noqa: E402

OUT = ROOT / "docs" / "config.md"
HEAD = """# Every training setting and its default

Generated from the config classes (`kitae/trainer/config.py` and the sections it names) by
`python scripts/config_reference.py` (a test keeps the two equal). A run's `config.yaml` (in `runs/NAME/`) holds
every value the run used. Set a value in the YAML file or with `kitae train CONFIG --set section.key=value`.
`null` means "not set": the comment says what happens then.

Some settings name a variant: `algorithm.loss`, `algorithm.advantage`, `data.sampler`, `sampling.engine`. Each variant declares its
own settings beside its code; a row `algorithm.loss` (dapo) `eps_high` is a setting of the dapo loss, with its
default for that loss. Write the name alone (`loss: dapo`) or the name with its settings (`loss: {type: dapo,
eps_high: 0.3}`; the sampler's name key is `name`: `sampler: {name: prioritized, floor: 0.1}`). The keys configs
have always used still work: a loss's settings written beside `loss` in `algorithm` (`algorithm: {loss: kimi,
kimi_tau: 0.1}`), an engine's beside `engine` in `sampling` (`sampling: {engine: server, servers: [...]}`). A setting the chosen variant does not take is an error naming the variants that take it. A
`config.yaml` saved by an older kitae, which wrote every loss and sampler setting whatever the variant, still
reads back and resumes: each variant keeps the settings it takes.
"""


def comments(cls: type) -> dict[str, str]:
    """{field: its comment} from the dataclass's source: the comment on the field's line and the comment lines
    under it (``# ----`` section lines aside); comment lines above a field that follows one without a comment
    are the next field's."""
    out: dict[str, str] = {}
    pending: list[str] = []  # comment lines since the last field
    last = None  # the last field, when it had a comment of its own
    for line in inspect.getsource(cls).splitlines() + [""]:
        comment = re.match(r"\s+#\s*(.*)$", line)
        if comment:
            if not comment.group(1).startswith("----"):
                pending.append(comment.group(1).strip())
            continue
        if pending and last is not None:
            out[last] = f"{out[last]} {' '.join(pending)}"
            pending = []
        field_line = re.match(r"    (\w+): [^#]*?(?:#\s*(.+))?$", line)
        if not field_line:
            pending, last = [], None
            continue
        name, inline = field_line.groups()
        out[name] = (inline or " ".join(pending)).strip()
        pending, last = [], name if inline else None
    return out


def rows(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    hints = typing.get_type_hints(cls)
    notes = comments(cls)
    out = []
    default = cls()
    for f in dataclasses.fields(cls):
        value = getattr(default, f.name)
        key = f"{prefix}{f.metadata.get('key', f.name)}"
        tp = hints[f.name]
        nested = [t for t in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(t)]
        family = _variant_family(tp)
        if family is not None:
            out += variant_rows(family, key, value, notes.get(f.name, ""), f.name in getattr(cls, "flat_settings", ()))
        elif f.metadata.get("spread"):  # a mapping written in the section itself: alarms.KIND.SETTING
            out.append((f"{prefix}KIND.SETTING", "(below)", notes.get(f.name, "")))
            for name, sub in value.items():
                out.append((prefix + name, "(section)", summary(type(sub))))
                out += rows(type(sub), f"{prefix}{name}.")
        elif dataclasses.is_dataclass(value):
            out.append((key, "(section)", notes.get(f.name) or summary(type(value))))
            out += rows(type(value), key + ".")
        elif value is None and nested and nested[0] is not type(None) and f.name not in ("train", "eval"):
            out.append((key, "null", notes.get(f.name, "") + f" (a section: {nested[0].__name__}, below)"))
            out += rows(nested[0], key + ".")
        else:
            out.append((key, shown(value), notes.get(f.name, "")))
    return out


def variant_rows(family: type[Variant], key: str, value: Variant | None, note: str, flat: bool) -> list[tuple]:
    """A field naming a variant: its row (the default variant's name), the settings every variant of the family
    has (``data.sampler.ema``), then each variant's own settings (`key` (NAME) `setting`) with that variant's
    default."""
    form = f"NAME or {{{family.name_key}: NAME, ...its settings}}"
    section = key.rpartition(".")[0]
    beside = f"; its settings may also be written beside it, as `{section}.SETTING`" if flat else ""
    article = "an" if family.kind[0] in "aeiou" else "a"
    out = [(key, shown(value.type if value is not None else None), f"{note} ({article} {family.kind}: {form}{beside})")]
    shared = {f.name for f in dataclasses.fields(family)}
    for f in dataclasses.fields(family):
        if f.name != "type":
            out.append((f"{key}.{f.name}", shown(getattr(family(), f.name)), field_note(family, f.name)))
    for name in family.registry.names():
        settings = family.settings_class(name, "")
        for f in dataclasses.fields(settings):
            if f.name not in shared:
                out.append((f"{key} ({name}) {f.name}", shown(getattr(settings(), f.name)),
                            field_note(settings, f.name)))
    return out


def field_note(cls: type, name: str) -> str:
    """The comment of field `name` in `cls`, or in the class it inherits the field from."""
    return next((c for c in (comments(k).get(name) for k in cls.__mro__ if dataclasses.is_dataclass(k)) if c), "")


def summary(cls: type) -> str:
    """The first sentence of a section's docstring ('' for none)."""
    doc = cls.__doc__ or ""
    if doc.startswith(f"{cls.__name__}("):  # the docstring dataclasses make up
        return ""
    text = " ".join(doc.split())
    return text.split(". ")[0].rstrip(".") + "." if text else ""


def shown(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    return repr(value) if isinstance(value, str) else str(value)


def page() -> str:
    lines = [HEAD, "| setting | default | what it is |", "|---|---|---|"]
    for key, value, note in rows(TrainConfig):
        cell = value.replace("|", "\\|")
        shown_key = "` (".join(key.split(" (", 1)).replace(") ", ") `") if " (" in key else key
        lines.append(f"| `{shown_key}` | `{cell}` | {note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    OUT.write_text(page(), encoding="utf-8")
    print(f"wrote {OUT}")

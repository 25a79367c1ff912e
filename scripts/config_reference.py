"""Write docs/config.md: every field of the training config with its default and the comment beside it in
kitae/trainer/config.py. tests/test_config_reference.py fails when the page and the code differ.

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

from kitae.config import Variant  # noqa: E402
from kitae.trainer.config import TrainConfig  # noqa: E402

OUT = ROOT / "docs" / "config.md"
HEAD = """# Every training setting and its default

Generated from `kitae/trainer/config.py` by `python scripts/config_reference.py` (a test keeps the two equal).
A run's `config.yaml` (in `runs/NAME/`) holds every value the run used. Set a value in the YAML file or with
`kitae train CONFIG --set section.key=value`. `null` means "not set": the comment says what happens then.

A setting marked *(engine server)* belongs to that variant (its settings are declared beside its code): write it
beside the variant's name, as listed (`sampling: {engine: server, servers: [...]}`, the keys configs have always
used), or under it (`sampling: {engine: {type: server, servers: [...]}}`). Given with another variant it is an
error naming the variant that takes it.
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
        if isinstance(value, Variant):
            out += variant_rows(type(value), key, value.type, notes.get(f.name, ""),
                                prefix if f.name in getattr(cls, "flat_settings", ()) else key + ".")
        elif dataclasses.is_dataclass(value):
            out.append((key, "(section)", notes.get(f.name) or summary(type(value))))
            out += rows(type(value), key + ".")
        elif value is None and nested and nested[0] is not type(None) and f.name not in ("train", "eval"):
            out.append((key, "null", notes.get(f.name, "") + f" (a section: {nested[0].__name__}, below)"))
            out += rows(nested[0], key + ".")
        else:
            out.append((key, shown(value), notes.get(f.name, "")))
    return out


def variant_rows(settings: type, key: str, name: str, note: str, at: str) -> list[tuple[str, str, str]]:
    """A variant field (kitae.config.Variant): its name, then each variant's own settings (at `at`: beside the
    name in its section, for a section that keeps flat keys), marked with the variant that takes them."""
    family = next(c for c in settings.__mro__ if "registry" in vars(c))
    out = [(key, repr(name), note)]
    for variant in family.registry.names():
        own = family.settings_class(variant, "")
        if own is family or not dataclasses.fields(own)[1:]:
            continue
        for sub, value, text in rows(own, at):
            if not sub.endswith(".type"):
                out.append((sub, value, f"*({family.kind} {variant})* {text}"))
    return out


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
        lines.append(f"| `{key}` | `{cell}` | {note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    OUT.write_text(page(), encoding="utf-8")
    print(f"wrote {OUT}")

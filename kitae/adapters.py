"""LoRA adapter folders that load on another machine, and a checkpoint's tokenizer files as the base had them.

A LoRA checkpoint's model/ is peft's adapter (adapter_config.json, adapter_model.safetensors, README.md) plus:

- ``kitae_adapter.json``: the base by name (``{"base": ID, "revision": COMMIT, "quantization": {...} | null}``):
  a Hub id at the snapshot's commit when the base came from the Hub cache, the folder's path when it was a
  local folder, the bundled model's name for a bundled one; and ``model.quantization`` as trained;
- adapter_config.json's ``base_model_name_or_path`` and ``revision`` and the model card's ``base_model`` say the
  same (peft writes the absolute snapshot path there, which plain ``from_pretrained`` on another machine takes
  for a malformed repository id);
- the base's generation_config.json (Llama 3's three end-of-turn ids; without it a loader falls back to
  config.json's one) and tokenizer files.

Every checkpoint (full or adapter) keeps the tokenizer files of the base unchanged (:func:`keep_base_files`):
kitae sets a pad token on the tokenizer it batches with (Llama 3 gets ``<|eot_id|>``), which must not reach a
saved tokenizer, where a later SFT collator that masks padding would mask every end of turn.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from kitae.models import ADAPTER_METADATA, BaseName, base_name

# files of the base copied into an adapter folder as they are (weights and config.json stay with the base)
BASE_EXTRAS = ("generation_config.json",)


def name_base(model: Any, base_folder: str | Path) -> BaseName:
    """Set every adapter config of peft `model` to name its base by :func:`base_name` (what
    adapter_config.json will hold)."""
    name = base_name(base_folder)
    for config in model.peft_config.values():
        config.base_model_name_or_path, config.revision = name.name, name.revision
    return name


def finish_adapter_folder(dest: Path, base_folder: str | Path, quantization: Any = None) -> None:
    """After peft's save_pretrained into `dest`: kitae_adapter.json, the model card's base_model, and the
    base's :data:`BASE_EXTRAS`."""
    from kitae.quantization import as_dict

    name = base_name(base_folder)
    q = as_dict(quantization) if quantization is not None else None
    meta = {"base": name.name, "revision": name.revision, "quantization": q}
    (dest / ADAPTER_METADATA).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    _fix_model_card(dest / "README.md", name, q)
    for extra in BASE_EXTRAS:
        if (Path(base_folder) / extra).is_file():
            shutil.copyfile(Path(base_folder) / extra, dest / extra)


def _fix_model_card(card: Path, name: BaseName, quantization: dict | None) -> None:
    if not card.is_file():
        return
    from huggingface_hub import ModelCard

    mc = ModelCard.load(card)
    mc.data["base_model"] = name.name
    at = f" at revision {name.revision}" if name.revision else ""
    how = (f"over its {quantization['bits']}-bit quantization (bitsandbytes, {quantization})" if quantization
           else "over its full-precision weights")
    note = (f"\n\nA LoRA adapter trained with kitae on `{name.name}`{at}, {how}. kitae loads it with "
            f"`kitae chat -m FOLDER`; peft with `PeftModel.from_pretrained(base, FOLDER)`.\n")
    mc.text = mc.text.rstrip("\n") + note
    mc.save(card)


def keep_base_files(dest: Path, written: list[str], base_folder: str | Path | None) -> None:
    """Put back the base's own copy of each tokenizer file `written` (names tokenizer.save_pretrained wrote into
    `dest`), and remove a written one the base lacks, so the checkpoint's tokenizer is the base's as it was.
    Nothing changes when the base has none of them (its tokenizer came from elsewhere)."""
    if base_folder is None:
        return
    base = Path(base_folder)
    if not any((base / name).is_file() for name in written):
        return
    for name in written:
        if (base / name).is_file():
            shutil.copyfile(base / name, dest / name)
        else:
            (dest / name).unlink(missing_ok=True)

"""Loading models and tokenizers, and where the bundled ones live.

The bundled base model ships inside the package (kitae/assets/models/kitae-tiny-base), so the main job runs on
a fresh machine with no download. Nothing here ever contacts a model hub for the bundled assets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kitae.errors import KitaeError

ASSETS = Path(__file__).parent / "assets"
BUNDLED_MODEL = ASSETS / "models" / "kitae-tiny-base"
BUNDLED_RM = ASSETS / "models" / "kitae-tiny-rm"
BUNDLED_DATA = ASSETS / "data" / "arith"


def resolve_model_path(path: str | Path | None) -> str:
    """`None` or "bundled" -> the bundled base model; a local folder as is; anything else is passed on."""
    if path is None or str(path) in ("bundled", "kitae-tiny-base"):
        if not (BUNDLED_MODEL / "config.json").exists():
            raise KitaeError(
                f"the bundled model is missing at {BUNDLED_MODEL}; rebuild it with "
                "`python scripts/build_base_model.py`"
            )
        return str(BUNDLED_MODEL)
    return str(path)


def load_tokenizer(path: str | Path | None) -> Any:
    """A tokenizer ready for batched generation: left padding and a pad token.

    `padding_side` is not saved by transformers, so it is set here every time.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model_path(path))
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token or "<|endoftext|>"
    return tok


def load_causal_lm(path: str | Path | None, dtype: str = "float32", device: str = "cpu") -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(path), dtype=torch_dtype)
    return model.to(device)

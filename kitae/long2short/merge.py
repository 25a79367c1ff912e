"""Model merging (Kimi k1.5 §2.4): the weighted average of two or more models' weights.

    merged = Σ_m w_m · θ_m   with Σ_m w_m = 1 (the weights are normalized; the paper averages two models)

Every model must have the same architecture (same parameter names and shapes). A LoRA adapter folder (one with
``adapter_config.json``) is first merged into its base model (``merge_and_unload``), so "base + adapter" takes
part as a full model. The merged model is saved with the first model's tokenizer and a ``merge.json`` that says
what was merged, with which weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from kitae.errors import ConfigError, KitaeError


def normalize_weights(weights: list[float] | None, n: int) -> list[float]:
    """Equal weights by default; otherwise non-negative weights scaled to sum to 1.

    >>> normalize_weights(None, 2), normalize_weights([3, 1], 2)
    ([0.5, 0.5], [0.75, 0.25])
    """
    if weights is None:
        return [1.0 / n] * n
    if len(weights) != n:
        raise ConfigError("--weights", f"give one weight per model: {n} models, {len(weights)} weights")
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ConfigError("--weights", f"weights must be >= 0 with a positive sum, got {weights}")
    total = float(sum(weights))
    return [w / total for w in weights]


def load_full_model(path: str | Path, base: str | None = None) -> Any:
    """A causal LM from a model folder, or from a LoRA adapter folder merged into its base model."""
    from kitae.models import load_causal_lm, resolve_model_path

    path = Path(path)
    adapter_cfg = path / "adapter_config.json"
    if not adapter_cfg.exists():
        return load_causal_lm(path)
    import peft

    base_path = base or json.loads(adapter_cfg.read_text()).get("base_model_name_or_path")
    if not base_path:
        raise KitaeError(f"{path}: a LoRA adapter without base_model_name_or_path; pass --base")
    if not base:
        base_path = resolve_model_path(base_path, f"{adapter_cfg} base_model_name_or_path (or pass --base)")
    model = peft.PeftModel.from_pretrained(load_causal_lm(base_path), str(path))
    return model.merge_and_unload()


def average_state_dicts(states: list[dict[str, torch.Tensor]], weights: list[float], names: list[str]) -> dict:
    """Σ_m w_m · state_m, computed in float32 and cast back to the first model's dtypes."""
    first = states[0]
    for name, state in zip(names[1:], states[1:]):
        _check_same_shapes(first, state, names[0], name)
    out = {}
    for key, t0 in first.items():
        if not torch.is_floating_point(t0):
            out[key] = t0.clone()  # integer buffers (e.g. position ids) are copied, not averaged
            continue
        acc = sum(w * s[key].float() for w, s in zip(weights, states))  # [*shape]
        out[key] = acc.to(t0.dtype)
    return out


def _check_same_shapes(a: dict, b: dict, name_a: str, name_b: str) -> None:
    missing = sorted(set(a) ^ set(b))
    if missing:
        raise KitaeError(f"cannot merge {name_a} and {name_b}: different parameters, e.g. {missing[0]!r}")
    for key in a:
        if a[key].shape != b[key].shape:
            raise KitaeError(
                f"cannot merge {name_a} and {name_b}: {key} has shape {tuple(a[key].shape)} vs {tuple(b[key].shape)}"
            )


def merge_models(
    paths: list[str], out: str | Path, weights: list[float] | None = None, base: str | None = None
) -> Path:
    """Merge the models at `paths` into `out` (a model folder kitae and transformers load); returns `out`."""
    from kitae.models import load_tokenizer

    if len(paths) < 2:
        raise ConfigError("--model", "give at least two models to merge")
    w = normalize_weights(weights, len(paths))
    models = [load_full_model(p, base) for p in paths]
    merged = average_state_dicts([m.state_dict() for m in models], w, [str(p) for p in paths])
    target = models[0]
    target.load_state_dict(merged)
    out = Path(out)
    target.save_pretrained(out)
    tok_dir = next((p for p in paths if (Path(p) / "tokenizer_config.json").exists()), base or paths[0])
    load_tokenizer(tok_dir).save_pretrained(out)
    (out / "merge.json").write_text(json.dumps({"method": "weight average", "models": list(map(str, paths)),
                                                "weights": w}, indent=2) + "\n")
    return out

"""A base model's linear layers in 4 or 8 bits through bitsandbytes (``model.quantization``; QLoRA: a LoRA adapter
trains over the frozen, quantized base, Dettmers et al. 2023).

bitsandbytes 0.50 runs its 4-bit and 8-bit layers on CPU as well as on CUDA, so the same config trains in CI.
On a CPU with AVX-512 BF16 it tries, when imported, to fetch a faster 4-bit matmul from the Hugging Face Hub
(``kernels-community/quantization-bitsandbytes``); with ``HF_HUB_OFFLINE=1`` that fails and it logs a warning
("Failed to load CPU gemm_4bit_forward from kernels-community ...") and uses its own CPU code. kitae filters
that warning when offline (:func:`quiet_offline_kernel_warnings`): that kernel is only for a repacked bf16
inference layout that kitae turns off anyway (:func:`keep_trainable_layout` says why), so nothing is missing.

What cannot work is refused before any weight is read (:func:`check_supported`): bitsandbytes not installed, a
device whose backend lacks the asked layer (found by running one tiny layer there), bits other than 4 or 8
(``model.quantization.bits``' choices). Full fine-tuning of a quantized model is refused by the config
(kitae.trainer.config.ModelConfig.validate).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from kitae.errors import ConfigError

@dataclass
class QuantizationConfig:
    """The base model's weights held in 4 or 8 bits by bitsandbytes (QLoRA: only the LoRA adapter trains; the
    reference model is the same base with the adapter switched off). Needs ``pip install 'kitae[quant]'``."""

    bits: Literal[4, 8] = 4  # 4: bitsandbytes' Linear4bit (QLoRA); 8: LLM.int8 (Linear8bitLt)
    type: Literal["nf4", "fp4"] = "nf4"  # 4-bit only: the data type of the quantized weights (NF4 is QLoRA's)
    double_quant: bool = True  # 4-bit only: quantize the quantization constants too (about 0.4 bits a weight less)
    compute_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # 4-bit only: the dtype the
    # dequantized weights multiply in; auto: model.dtype (served: --dtype)


# What bitsandbytes and the kernels package log when, offline, the Hub kernel cannot be fetched (nothing is wrong)
_OFFLINE_KERNEL = {"bitsandbytes.backends.cpu.ops": "Failed to load CPU gemm_4bit_forward from kernels-community",
                   "kernels._internals.hf_hub": "Skipping publisher trust check for 'kernels-community/"}


class _OfflineKernelFilter(logging.Filter):
    """Drops the one message of its logger that reports the Hub kernel not fetched while HF_HUB_OFFLINE is set."""

    def __init__(self, start: str):
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        from kitae.hub import offline

        return not (offline() and str(record.msg).startswith(self.start))


def quiet_offline_kernel_warnings() -> None:
    """Filter the offline Hub-kernel warnings (the module docstring says why they are noise). Call before anything
    imports bitsandbytes: peft does when it is installed, whether or not a model is quantized."""
    for name, start in _OFFLINE_KERNEL.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OfflineKernelFilter) for f in logger.filters):
            logger.addFilter(_OfflineKernelFilter(start))


def import_bitsandbytes(key: str = "model.quantization") -> Any:
    """bitsandbytes with its offline Hub-kernel warnings filtered, or a ConfigError under `key` saying how to
    install it."""
    quiet_offline_kernel_warnings()
    try:
        import bitsandbytes
    except ImportError:
        raise ConfigError(key, "needs bitsandbytes (0.50 or newer): pip install 'kitae[quant]'") from None
    # LLM.int8 casts float32 inputs to float16 and warns once per layer call; that is how it computes, not a fault
    warnings.filterwarnings("ignore", message="MatMul8bitLt: inputs will be cast", category=UserWarning)
    return bitsandbytes


def keep_trainable_layout(model: Any) -> Any:
    """Turn off bitsandbytes' CPU inference repacking of 4-bit weights in `model`.

    On a CPU with AVX-512 BF16, bitsandbytes 0.50 repacks a Linear4bit's weight the first time it runs in eval
    mode without gradients (a rollout), and from then on multiplies through a bf16 kernel with no backward: the
    gradients of every LoRA layer below it become 0 (a QLoRA run trains nothing), and the product is in bf16
    whatever ``compute_dtype`` says, so a reloaded adapter would not give the trained model's tokens. Kept in
    its quantized layout, a layer computes in ``compute_dtype`` in training and sampling alike."""
    bnb = import_bitsandbytes()
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False
    return model


def as_dict(q: Any) -> dict[str, Any]:
    """``model.quantization`` as plain values (what kitae_adapter.json records)."""
    return dataclasses.asdict(q) if dataclasses.is_dataclass(q) else dict(q)


def compute_dtype(q: Any, dtype: str) -> str:
    """The dtype 4-bit layers multiply in: ``compute_dtype``, or for auto the model's `dtype`."""
    return dtype if q.compute_dtype == "auto" else q.compute_dtype


def bitsandbytes_config(q: Any, dtype: str, device: Any, key: str = "model.quantization",
                        skip: list[str] | None = None) -> Any:
    """transformers' BitsAndBytesConfig for `q` (bits, type, double_quant, compute_dtype), after
    :func:`check_supported` on `device`; `skip`: modules kept in `dtype` (a reward model's score head)."""
    import torch
    from transformers import BitsAndBytesConfig

    check_supported(q.bits, q.type, str(device), key)
    if q.bits == 8:
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=skip)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=q.type,
                              bnb_4bit_use_double_quant=q.double_quant, llm_int8_skip_modules=skip,
                              bnb_4bit_compute_dtype=getattr(torch, compute_dtype(q, dtype)))


# --quantize of `kitae serve model` and `kitae serve rm`: a name for each model.quantization they can ask for
QUANTIZE_FLAG = {"nf4": {"bits": 4, "type": "nf4"}, "fp4": {"bits": 4, "type": "fp4"}, "int8": {"bits": 8}}
QUANTIZE_HELP = ("Hold the model's linear layers in 4 bits (nf4, fp4: QLoRA's, with double quantization) or 8 "
                 "(int8: LLM.int8) through bitsandbytes (pip install 'kitae[quant]'); computed in --dtype. An "
                 "adapter folder's base is quantized as it was trained without this.")


def from_flag(name: str | None) -> QuantizationConfig | None:
    """The quantization a --quantize value names (:data:`QUANTIZE_FLAG`), or None for none."""
    if name is None or name == "none":
        return None
    if name not in QUANTIZE_FLAG:
        raise ConfigError("--quantize", f"expected one of {', '.join(QUANTIZE_FLAG)} or none, got {name!r}")
    return QuantizationConfig(**QUANTIZE_FLAG[name])


def check_supported(bits: int, kind: str, device: str, key: str = "model.quantization") -> None:
    """Refuse what bitsandbytes cannot run here: bits other than 4 or 8, or a layer its backend for `device`
    lacks (one 64x64 layer is quantized and run there; the error it raises is the reason given)."""
    if bits not in (4, 8):
        raise ConfigError(f"{key}.bits", f"bitsandbytes quantizes to 4 or 8 bits, not {bits}")
    problem = _layer_problem(bits, kind, device, key)
    if problem:
        what = f"{bits}-bit {kind}" if bits == 4 else "8-bit (LLM.int8)"
        raise ConfigError(key, f"bitsandbytes cannot run {what} layers on {device} ({problem}); use a device it "
                          "supports (CUDA, or CPU with bitsandbytes 0.50+), another quantization, or none")


@lru_cache(maxsize=16)
def _layer_problem(bits: int, kind: str, device: str, key: str) -> str | None:
    import torch

    bnb = import_bitsandbytes(key)
    try:
        if bits == 4:
            layer = bnb.nn.Linear4bit(64, 64, bias=False, quant_type=kind, compute_dtype=torch.float32)
        else:
            layer = bnb.nn.Linear8bitLt(64, 64, bias=False, has_fp16_weights=False)
        layer = layer.to(device)
        with torch.no_grad():
            layer(torch.ones(1, 64, device=device))
    except Exception as exc:  # noqa: BLE001 - whatever the backend raises is the reason it cannot run here
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{type(exc).__name__}: {first}"
    return None


# At import (kitae.models imports this module): a script that imports peft (which imports bitsandbytes when it is
# installed) after kitae gets the filter too, whether or not it quantizes anything.
quiet_offline_kernel_warnings()

"""Loading models and tokenizers, and where the bundled ones live.

The bundled base model ships inside the package (kitae/assets/models/kitae-tiny-base), so the main job runs on
a fresh machine with no download. Every model path goes through :func:`resolve_model_path` (or
:func:`model_folder`): "bundled", a local folder holding config.json, or a Hugging Face Hub id (``ORG/NAME``,
optionally ``ORG/NAME@REVISION``), found in the Hub cache or downloaded there as transformers would
(kitae.hub: ``HF_HOME``, ``HF_TOKEN``, ``HF_HUB_OFFLINE``). A missing folder, an id that is neither cached
nor reachable, or a folder without config.json is one clear error before transformers is asked for anything;
so is a folder without tokenizer files or with a tokenizer file that is not JSON (:func:`check_tokenizer_files`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kitae.config import setting
from kitae.errors import ConfigError
from kitae.hub import hub_id_snapshot
from kitae.quantization import QuantizationConfig, quiet_offline_kernel_warnings

ASSETS = Path(__file__).parent / "assets"
BUNDLED_MODEL = ASSETS / "models" / "kitae-tiny-base"
BUNDLED_RM = ASSETS / "models" / "kitae-tiny-rm"
BUNDLED_VL = ASSETS / "models" / "kitae-tiny-vl"
BUNDLED_CODE = ASSETS / "models" / "kitae-tiny-code"
BUNDLED_TOOLS = ASSETS / "models" / "kitae-tiny-tools"
BUNDLED_DATA = ASSETS / "data" / "arith"


_BUILD = {BUNDLED_MODEL: "scripts/build_base_model.py", BUNDLED_RM: "scripts/build_reward_model.py",
          BUNDLED_VL: "scripts/build_vision_model.py", BUNDLED_CODE: "scripts/build_code_model.py",
          BUNDLED_TOOLS: "scripts/build_tools_model.py"}


def resolve_model_path(path: str | Path | None, key: str = "model", adapter: bool = False,
                       revision: str | None = None) -> str:
    """`None`, "bundled" or "kitae-tiny-base" -> the bundled base model; "kitae-tiny-vl" -> the bundled
    vision-language model; "kitae-tiny-code" -> the bundled code model; "kitae-tiny-tools" -> the bundled model
    that calls a calculator tool; a local model folder as given; a Hub id -> its snapshot folder in the Hub cache.

    Anything else raises ConfigError under `key` (the flag or config field that named it) before any model
    library is asked: see :func:`model_folder`.
    """
    if path is None or str(path) in ("bundled", "kitae-tiny-base"):
        path = BUNDLED_MODEL
    elif str(path) == "kitae-tiny-vl":
        path = BUNDLED_VL
    elif str(path) == "kitae-tiny-code":
        path = BUNDLED_CODE
    elif str(path) == "kitae-tiny-tools":
        path = BUNDLED_TOOLS
    return model_folder(path, key, adapter, revision)


def model_folder(path: str | Path, key: str = "model", adapter: bool = False, revision: str | None = None) -> str:
    """`path` when it is a folder holding config.json (with `adapter`, adapter_config.json also counts: a LoRA
    adapter); a Hub id's snapshot folder (kitae.hub.hub_snapshot, `revision` or ``ID@REVISION``) when no such
    local path exists; otherwise ConfigError ``KEY: no model folder at 'PATH' (why)``."""
    folder = Path(path)
    names = ("config.json", "adapter_config.json") if adapter else ("config.json",)
    if folder.is_dir() and any((folder / name).is_file() for name in names):
        if revision is not None:
            raise ConfigError(f"{key} revision", f"{str(path)!r} is a local folder: a revision applies to Hub ids "
                              "only; remove it")
        return str(path)
    snapshot = hub_id_snapshot(str(path), revision, key)
    if snapshot is not None:
        if any((Path(snapshot) / name).is_file() for name in names):
            return snapshot
        raise ConfigError(key, f"the Hub repository {model_name(snapshot)!r} has no {' or '.join(names)} (in "
                          f"{snapshot}): it is not a transformers model; give a model repository or a local folder")
    raise ConfigError(key, f"no model folder at {str(path)!r} ({_why(folder, names)})")


def model_name(folder: str | Path) -> str:
    """What to call the model in `folder`: ``ORG/NAME`` for a Hub cache snapshot
    (``.../models--ORG--NAME/snapshots/REV``), else the folder's name."""
    folder = Path(folder)
    repo = folder.parent.parent.name
    if folder.parent.name == "snapshots" and repo.startswith("models--"):
        return repo.removeprefix("models--").replace("--", "/")
    return folder.name


def _why(folder: Path, names: tuple[str, ...]) -> str:
    if folder in _BUILD:
        return f"the bundled model is missing; rebuild it with `python {_BUILD[folder]}`"
    if folder.is_dir():
        return f"the folder has no {' or '.join(names)}"
    if folder.exists():
        return "that is a file; give the folder that holds config.json and the weights"
    return "give a local folder holding config.json, a Hub id such as Qwen/Qwen2.5-0.5B-Instruct, or 'bundled'"


def load_tokenizer(path: str | Path | None, key: str = "model") -> Any:
    """A tokenizer ready for batched generation: left padding and a pad token.

    `padding_side` is not saved by transformers, so it is set here every time. A folder without tokenizer files,
    or with one that cannot be read, is a ConfigError under `key` (:func:`checked_load`).
    """
    from transformers import AutoTokenizer

    folder = resolve_model_path(path, key, adapter=True)
    tok = checked_load(AutoTokenizer.from_pretrained, folder, key)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token or "<|endoftext|>"
    return tok


def load_causal_lm(path: str | Path | None, dtype: str = "float32", device: str = "cpu",
                   attn_implementation: str | None = None, quantization: Any = None) -> Any:
    """The model at `path`: a causal LM, or a vision-language model (:func:`is_vision_model`) through
    ``AutoModelForImageTextToText``, which is a causal LM over text and image tokens. ``attn_implementation``
    ("eager", "sdpa", "flash_attention_2"; None: transformers' default for the model) reaches its config.
    ``quantization`` (kitae.trainer.config.QuantizationConfig, or None): its linear layers in 4 or 8 bits by
    bitsandbytes (kitae.quantization), loaded straight onto `device`. A LoRA adapter folder (adapter_config.json,
    no config.json) is loaded by :func:`load_adapter_model`: its base, then the adapter."""
    if is_adapter_folder(path):
        return load_adapter_model(path, dtype, device, attn_implementation, quantization)
    quiet_offline_kernel_warnings()  # transformers' bitsandbytes integration imports it
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    folder = resolve_model_path(path)
    vision = is_vision_model(folder)
    auto = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if quantization is not None:
        from kitae.quantization import bitsandbytes_config

        extra.update(quantization_config=bitsandbytes_config(quantization, dtype, device),
                     device_map={"": str(device)})
    model = auto.from_pretrained(folder, dtype=torch_dtype, **extra)
    if vision:
        mask_placeholder_tokens(model)
    if quantization is None:
        return model.to(device)
    from kitae.quantization import keep_trainable_layout

    return keep_trainable_layout(model)


def is_adapter_folder(path: str | Path | None) -> bool:
    """Whether `path` is a local LoRA adapter folder: adapter_config.json and no config.json."""
    folder = Path(path) if path is not None else None
    return (folder is not None and folder.is_dir() and (folder / "adapter_config.json").is_file()
            and not (folder / "config.json").is_file())


# ---- LoRA adapter folders ----------------------------------------------------------------------------
# kitae's record of an adapter's base and quantization, beside peft's adapter_config.json (kitae.adapters writes it)
ADAPTER_METADATA = "kitae_adapter.json"


@dataclass(frozen=True)
class BaseName:
    """How an adapter names its base: a Hub id (with the snapshot's commit), a local path, or a bundled name."""

    name: str
    revision: str | None = None


def base_name(folder: str | Path) -> BaseName:
    """The name that finds the model folder `folder` on another machine: ``ORG/NAME`` at the commit for a Hub
    cache snapshot (``.../models--ORG--NAME/snapshots/COMMIT``), the bundled model's name for a bundled one,
    else the folder's absolute path (a local folder stays a local folder)."""
    folder = Path(folder).resolve()
    bundled = {BUNDLED_MODEL.resolve(): "kitae-tiny-base", BUNDLED_VL.resolve(): "kitae-tiny-vl",
               BUNDLED_CODE.resolve(): "kitae-tiny-code", BUNDLED_TOOLS.resolve(): "kitae-tiny-tools"}
    if folder in bundled:
        return BaseName(bundled[folder])
    hub = _snapshot_id(folder)
    return hub if hub is not None else BaseName(str(folder))


def _snapshot_id(folder: Path) -> BaseName | None:
    repo = folder.parent.parent.name
    if folder.parent.name == "snapshots" and repo.startswith("models--"):
        return BaseName(repo.removeprefix("models--").replace("--", "/"), folder.name)
    return None


@dataclass(frozen=True)
class AdapterBase:
    """An adapter folder's base: its model folder here, and the quantization it was trained over."""

    folder: str
    quantization: Any


def adapter_base(folder: str | Path) -> AdapterBase:
    """The base of adapter `folder`: kitae_adapter.json's when it has one, else adapter_config.json's
    base_model_name_or_path and revision; a missing absolute Hub-cache snapshot path (an adapter saved before
    kitae named bases) is read as the Hub id at that commit. Resolved as any model path (kitae.models), under the
    key naming the file it came from."""
    folder = Path(folder)
    meta = _read_json(folder / ADAPTER_METADATA) if (folder / ADAPTER_METADATA).is_file() else None
    if meta is not None:
        name, revision, q, key = meta.get("base"), meta.get("revision"), meta.get("quantization"), ADAPTER_METADATA
    else:
        config = _read_json(folder / "adapter_config.json")
        name, revision, q = config.get("base_model_name_or_path"), config.get("revision"), None
        key = "adapter_config.json"
    key = f"{folder / key} base"
    if not isinstance(name, str) or not name:
        raise ConfigError(key, "names no base model; set base_model_name_or_path in adapter_config.json to the base's "
                          "Hub id or folder")
    if Path(name).is_absolute() and not Path(name).exists():
        hub = _snapshot_id(Path(name))
        if hub is not None:
            name, revision = hub.name, revision or hub.revision
    return AdapterBase(resolve_model_path(name, key, revision=revision), _quantization(q, key))


def _quantization(q: Any, key: str) -> Any:
    if q is None:
        return None
    from kitae.config import from_dict

    if not isinstance(q, dict):
        raise ConfigError(f"{key} quantization", f"expected a mapping such as {{bits: 4, type: nf4}} or null, got {q!r}")
    return from_dict(QuantizationConfig, q, f"{key} quantization")


def _read_json(file: Path) -> dict:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(str(file), f"cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(str(file), "is not a JSON object")
    return data


def load_adapter_model(folder: str | Path, dtype: str = "float32", device: str = "cpu",
                       attn_implementation: str | None = None, quantization: Any = None,
                       trainable: bool = False) -> Any:
    """A peft model: the base named by the adapter folder (:func:`adapter_base`: kitae's
    kitae_adapter.json, else adapter_config.json's base_model_name_or_path and revision), quantized as the
    adapter was trained (kitae_adapter.json's quantization) unless `quantization` is given, with the adapter
    of `folder` on it. What ``kitae chat -m ADAPTER``, ``kitae eval -m ADAPTER``, ``kitae serve model --model
    ADAPTER`` and an adapter push to a server load; ``trainable``: the adapter's weights require gradients."""
    quiet_offline_kernel_warnings()  # peft imports bitsandbytes
    import peft

    base = adapter_base(folder)
    model = load_causal_lm(base.folder, dtype, device, attn_implementation,
                           quantization if quantization is not None else base.quantization)
    return peft.PeftModel.from_pretrained(model, str(folder), is_trainable=trainable)


# ---- tokenizer files ---------------------------------------------------------------------------------------
# The files a tokenizer is read from (one of them must be there), as globs: the fast tokenizer, a SentencePiece
# model (tokenizer.model, spiece.model), a vocabulary (vocab.json with merges.txt, vocab.txt), a tiktoken file
TOKENIZER_FILES = ("tokenizer.json", "*.model", "vocab.*", "*.tiktoken")
JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json")


def checked_load(load: Any, folder: str, key: str) -> Any:
    """``load(folder)`` (a transformers ``from_pretrained``) after checking the tokenizer files it reads: none
    there, or one that is not JSON, is a ConfigError under `key` naming the file (and line), not transformers'
    traceback; whatever else transformers refuses is one too, in its own words."""
    check_tokenizer_files(folder, key)
    try:
        return load(folder)
    except (OSError, ValueError, TypeError, KeyError) as exc:  # transformers and tokenizers raise these for bad files
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ConfigError(key, f"the tokenizer in {folder} cannot be loaded ({first}); copy the tokenizer files "
                          "of the base model into the folder (tokenizer.save_pretrained writes them)") from None


def check_tokenizer_files(folder: str | Path, key: str) -> None:
    folder = Path(folder)
    if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
        return  # a LoRA adapter: transformers reads the base model's tokenizer
    if not any(f.is_file() for pattern in TOKENIZER_FILES for f in folder.glob(pattern)):
        raise ConfigError(key, f"{folder} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); copy "
                          "them, with tokenizer_config.json, from the model it was trained from "
                          "(tokenizer.save_pretrained(FOLDER) writes them)")
    for name in JSON_FILES:
        _check_json(folder / name, key)


def _check_json(file: Path, key: str) -> None:
    import json

    if not file.is_file():
        return
    try:
        json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(key, f"{file}: not UTF-8 text; copy the file again from the model it came from") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(key, f"{file}: not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}); the "
                          "file is broken or cut short: copy it again from the model it came from") from None


# A logit no sampled token can have (exp underflows to 0 in fp32) that keeps log-probs and entropy finite.
MASKED_LOGIT = -1e4


def mask_placeholder_tokens(model: Any) -> list[int]:
    """Make a vision-language model's image (and video) placeholder tokens impossible as next tokens.

    A placeholder in the sampled text would be read as an image without image features (the forward fails:
    "image features and image tokens do not match"). A hook on the output layer sets their logits to
    :data:`MASKED_LOGIT` in every forward (rollout engine, policy update, reference model), so they are never
    sampled and the engine's log-probs and the update's are of one distribution. Returns the masked ids."""
    import torch

    config = model.config
    ids = sorted({int(v) for k in ("image_token_id", "image_token_index", "video_token_id", "video_token_index")
                  if isinstance(v := getattr(config, k, None), int) and v >= 0})
    head = model.get_output_embeddings()
    if not ids or head is None:
        return []
    index = torch.tensor(ids)

    def mask(_module, _inputs, logits):
        return logits.index_fill(-1, index.to(logits.device), MASKED_LOGIT)

    head.register_forward_hook(mask)
    return ids


# ---- vision-language models ---------------------------------------------------------------------------
def is_vision_model(path: str | Path | None) -> bool:
    """Whether the model folder holds a vision-language model: its config.json has a ``vision_config``
    (LLaVA, Idefics3/SmolVLM, Qwen2-VL, Gemma 3, ...)."""
    import json

    try:
        config = json.loads((Path(resolve_model_path(path)) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, ConfigError):
        return False
    return isinstance(config, dict) and isinstance(config.get("vision_config"), dict)


def load_processor(path: str | Path | None) -> Any:
    """The processor of a vision-language model folder (``AutoProcessor``), its tokenizer set up as
    :func:`load_tokenizer` sets one up."""
    from transformers import AutoProcessor

    processor = checked_load(AutoProcessor.from_pretrained, resolve_model_path(path), "model")
    tok = processor.tokenizer
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token or "<|endoftext|>"
    return processor


def language_targets(model: Any, names: list[str]) -> list[str] | str:
    """LoRA target modules: `names` as given for a text model; for a vision-language model a pattern that
    matches those names inside the language part only (its vision tower has q_proj, v_proj, ... too)."""
    if getattr(model.config, "vision_config", None) is None:
        return names
    return rf".*language_model.*\.({'|'.join(re.escape(n) for n in names)})"


# ---- the model: section of the training config -----------------------------------------------------------
@dataclass
class LoraConfig:
    r: int = setting(8, minimum=1)  # the adapter's rank
    alpha: int = 16  # scaling: the update is alpha / r times the low-rank product
    dropout: float = setting(0.0, minimum=0, maximum=1)  # dropout on the adapter's input
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class ModelConfig:
    path: str = "bundled"  # "bundled" (the tiny base model shipped with kitae), a local folder, or a Hub id
    revision: str | None = None  # a Hub id's branch, tag or commit (default: its main branch)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # the dtype forward and backward compute in;
    # with master_weights (kitae.trainer.setup.precision) the weights and the optimizer's state stay float32 and the
    # forward runs under autocast to this dtype
    master_weights: Literal["auto", "float32", "dtype"] = "auto"  # auto: float32 on CUDA, `dtype` on CPU
    attn_implementation: Literal["auto", "eager", "sdpa", "flash_attention_2"] = "auto"  # auto: flash_attention_2
    # on CUDA in bf16/fp16 when flash_attn imports, else transformers' default (sdpa)
    lora: LoraConfig | None = None
    quantization: QuantizationConfig | None = None  # the base's weights in 4 or 8 bits (QLoRA); needs lora: a
    # quantized model's own weights cannot be trained
    gradient_checkpointing: bool = False  # recompute activations in the backward pass: less memory, more time
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # the chat template's variables for every
    # prompt, e.g. {enable_thinking: false} for Qwen3
    end_marker: str | None = None  # the model's end of turn; default: found from its chat template (kitae.chat)

    def validate(self, path: str) -> None:
        if self.quantization is not None and self.lora is None:
            raise ConfigError(f"{path}.quantization", f"a {self.quantization.bits}-bit model's weights cannot be "
                              "trained (full fine-tuning needs real-valued weights); add model.lora to train a LoRA "
                              "adapter over the quantized base (QLoRA), or remove model.quantization")

"""SFT and DPO for long2short, through TRL's SFTTrainer and DPOTrainer (no training code of our own).

    sft(model="runs/verbose", data="l2s/shortest.jsonl", out="runs/l2s-sft")
    dpo(model="runs/verbose", data="l2s/pairs.jsonl", out="runs/l2s-dpo", beta=0.1)

Data are the files ``kitae long2short shortest`` / ``dpo-pairs`` write (TRL's conversational prompt-completion
and preference formats; other columns are dropped). SFT's loss covers the completion only (TRL's
``completion_only_loss`` for prompt-completion data). DPO's reference model is the starting model (TRL makes a
frozen copy). On a machine without a GPU both run with ``use_cpu=True`` and ``bf16=False``. The result is a
model folder (weights + tokenizer) that ``kitae eval`` and the trainer load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitae.errors import DataError


@dataclass
class TrainSettings:
    epochs: float = 1.0
    lr: float = 5e-5
    batch_size: int = 8
    grad_accum: int = 1
    max_length: int = 512
    max_steps: int = -1  # > 0 overrides epochs
    seed: int = 0
    logging_steps: int = 10


def _common_args(s: TrainSettings, out: Path) -> dict[str, Any]:
    import torch

    log_every = min(s.logging_steps, s.max_steps) if s.max_steps > 0 else s.logging_steps
    return {
        "output_dir": str(out), "num_train_epochs": s.epochs, "learning_rate": s.lr,
        "per_device_train_batch_size": s.batch_size, "gradient_accumulation_steps": s.grad_accum,
        "max_steps": s.max_steps, "seed": s.seed, "logging_steps": log_every, "logging_first_step": True,
        "max_length": s.max_length,
        "save_strategy": "no", "report_to": [], "bf16": False, "use_cpu": not torch.cuda.is_available(),
        "lr_scheduler_type": "constant", "disable_tqdm": True,
    }


def load_rows(path: str | Path, columns: tuple[str, ...]) -> Any:
    """A datasets.Dataset with just `columns`, checked row by row (DataError names file, row and field)."""
    import datasets

    from kitae.data.loader import read_jsonl

    path = Path(path)
    if not path.exists():
        raise DataError(str(path), None, None,
                        "file not found; write it with `kitae long2short shortest` or `dpo-pairs`")
    rows = []
    for i, row in read_jsonl(path):
        if not isinstance(row, dict):
            raise DataError(str(path), i, None, f"expected a JSON object with {', '.join(columns)}")
        for c in columns:
            if not isinstance(row.get(c), list) or not row[c]:
                raise DataError(str(path), i, c, "expected a non-empty list of chat messages")
        rows.append({c: row[c] for c in columns})
    if not rows:
        raise DataError(str(path), None, None, "no rows: no prompt had a correct sample to learn from")
    return datasets.Dataset.from_list(rows)


def sft(model: str, data: str | Path, out: str | Path, settings: TrainSettings = TrainSettings()) -> dict:
    """Supervised fine-tuning on prompt-completion rows; returns TRL's training metrics."""
    from trl import SFTConfig, SFTTrainer

    from kitae.models import load_causal_lm, load_tokenizer

    out = Path(out)
    args = SFTConfig(**_common_args(settings, out), completion_only_loss=True)
    tok = load_tokenizer(model)
    rows = load_rows(data, ("prompt", "completion"))
    trainer = SFTTrainer(model=load_causal_lm(model), args=args, train_dataset=rows, processing_class=tok)
    result = trainer.train()
    _save(trainer, tok, out)
    return dict(result.metrics)


def dpo(model: str, data: str | Path, out: str | Path, settings: TrainSettings = TrainSettings(),
        beta: float = 0.1) -> dict:
    """DPO on prompt/chosen/rejected rows, the starting model as the reference; returns TRL's final metrics and
    the last logged ones (rewards/accuracies, rewards/margins, ...)."""
    from trl import DPOConfig, DPOTrainer

    from kitae.models import load_causal_lm, load_tokenizer

    out = Path(out)
    args = DPOConfig(**_common_args(settings, out), beta=beta)
    tok = load_tokenizer(model)
    rows = load_rows(data, ("prompt", "chosen", "rejected"))
    trainer = DPOTrainer(model=load_causal_lm(model), args=args, train_dataset=rows, processing_class=tok)
    result = trainer.train()
    _save(trainer, tok, out)
    return {**_last_logged(trainer), **result.metrics}


def _last_logged(trainer: Any) -> dict:
    """The last training log entry (DPO's rewards/accuracies and margins live there, not in the final metrics)."""
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return dict(logs[-1]) if logs else {}


def _save(trainer: Any, tokenizer: Any, out: Path) -> None:
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))

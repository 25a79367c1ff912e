"""What the build scripts print about a model they built: template compliance and accuracy of its samples,
overall and by row labels (a sibling helper of scripts/build_*.py, not part of the package)."""

from __future__ import annotations

from kitae.chat import is_template_compliant
from kitae.graders.answer_match import answers_match


def score(rows: list[dict], completions: list[tuple[str, str]], labels: tuple[str, ...]) -> dict:
    """Compliance and accuracy of (text, finish reason) completions, overall and by each label in ``labels``."""
    groups: dict[str, list[tuple[bool, bool]]] = {}
    for row, (text, finish) in zip(rows, completions):
        hit = (is_template_compliant(text, finish), answers_match(text, row["reference_answer"]))
        for key in ("all", *(f"{label}={row[label]}" for label in labels)):
            groups.setdefault(key, []).append(hit)
    return {k: {"n": len(v), "compliance": round(sum(c for c, _ in v) / len(v), 3),
                "accuracy": round(sum(a for _, a in v) / len(v), 3)} for k, v in groups.items()}


def print_metrics(metrics: dict) -> None:
    for mode, table in metrics.items():
        print(f"[{mode}]")
        for key, m in table.items():
            print(f"  {key:20s} n={m['n']:4d}  compliance {m['compliance']:.3f}  accuracy {m['accuracy']:.3f}")


def build_main(argv: list[str] | None, doc: str, config_cls: type, default_out, default_data, build, eval_only) -> None:
    """The command line every build_*_model.py script shares: build the model, or only measure one."""
    import argparse
    from pathlib import Path

    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--out", type=Path, default=default_out, help="where to save the model (default: bundled)")
    p.add_argument("--data-dir", type=Path, default=default_data, help="where the task splits go / are read")
    p.add_argument("--eval-only", type=Path, metavar="MODEL_DIR", help="only measure an existing model")
    p.add_argument("--seed", type=int, default=config_cls.seed)
    p.add_argument("--steps", type=int, default=config_cls.steps)
    p.add_argument("--threads", type=int, default=config_cls.threads,
                   help=f"torch threads (default: {config_cls.threads or 'chosen from the model size, kitae.threads'})")
    args = p.parse_args(argv)
    if args.eval_only:
        eval_only(args.eval_only, args.data_dir, args.seed, args.threads)
        return
    build(config_cls(seed=args.seed, steps=args.steps, threads=args.threads), args.out, args.data_dir)


def write_card(out_dir, info: dict, card: str) -> None:
    """A bundled model's build_info.json and its model card README.md (``card``, rendered from ``info`` alone)."""
    import json

    (out_dir / "build_info.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / "README.md").write_text(card, encoding="utf-8")

"""JSON that every reader accepts: NaN and ±infinity (which JSON has no words for) become null.

Python's json writes them as the bare words NaN and Infinity, which browsers, other languages' clients and
SQLite's json_extract refuse. The run store, the run page and the servers all write through here.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """`value` with every non-finite float (at any depth of dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(payload: Any, **kwargs: Any) -> str:
    """Strict JSON text of `payload` (non-ASCII kept as is); the copy with nulls is made only when needed."""
    try:
        return json.dumps(payload, ensure_ascii=False, allow_nan=False, **kwargs)
    except ValueError:
        return json.dumps(finite(payload), ensure_ascii=False, allow_nan=False, **kwargs)

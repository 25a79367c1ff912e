"""The run store: one SQLite database per run (runs/NAME/run.db), the only contract between the trainer and
the things that show a run (`kitae runs`, the web page). Schema and API: docs/run_store.md."""

from kitae.store.reader import GROUP_FILTERS, GROUP_ORDERS
from kitae.store.records import EvalRow, GroupRecord, GroupRow, RunSummary, SampleRecord
from kitae.store.runs import list_runs, open_run
from kitae.store.schema import SCHEMA_VERSION
from kitae.store.status import RUN_STATUSES
from kitae.store.store import DB_NAME, RunStore

__all__ = [
    "DB_NAME",
    "GROUP_FILTERS",
    "GROUP_ORDERS",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "EvalRow",
    "GroupRecord",
    "GroupRow",
    "RunStore",
    "RunSummary",
    "SampleRecord",
    "list_runs",
    "open_run",
]

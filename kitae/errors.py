"""Errors for people: each says what is wrong, where (file, row, field or key path) and how to fix it.

Library code raises these; only the CLI prints them and exits.
"""

from __future__ import annotations


class KitaeError(Exception):
    """Base class of every error kitae raises on purpose."""


class ConfigError(KitaeError, ValueError):
    """A config value or grader spec is wrong. The message starts with the key path."""

    def __init__(self, path: str, message: str):
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class DataError(KitaeError, ValueError):
    """A dataset row is wrong. The message names file, row (1-based) and field."""

    def __init__(self, file: str, row: int | None, field: str | None, message: str):
        self.file, self.row, self.field = file, row, field
        where = str(file)
        if row is not None:
            where += f", row {row}"
        if field:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")

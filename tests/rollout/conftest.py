"""The trainer tests' tiny model, prompt set and reward functions, for the server engine's training runs."""

from tests.trainer.conftest import rewards_on_path, tiny_assets  # noqa: F401 (fixtures)

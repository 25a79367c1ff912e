"""Fixtures shared by test packages, as pytest plugin modules the root conftest registers (``pytest_plugins``).

Every pytest start loads these modules, so they import nothing heavy at the top: torch, transformers and the
model code are imported inside the fixtures that need them (tests/test_harness.py checks that a session of
pure-Python tests never imports torch). Helpers that are not fixtures (``write_config``, ``screenshot``) are
imported from here by name; a test never imports a conftest.
"""

"""The ``kitae`` command: each group of commands in its own module with a ``register(app)`` (main.py wires them).

Commands parse options, call the library and print; this is the only part that exits with an error code.
Nothing is imported here.
"""

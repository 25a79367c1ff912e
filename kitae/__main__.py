"""`python -m kitae` runs the `kitae` command."""

from kitae.cli.main import main

main()

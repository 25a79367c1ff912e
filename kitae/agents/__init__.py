"""Agents: multi-turn, tool-using rollouts (issue 33). The runner's slice writes the public names here."""

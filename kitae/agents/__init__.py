"""Agents: multi-turn, tool-using rollouts (issue 33)."""

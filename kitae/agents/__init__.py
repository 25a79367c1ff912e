"""Agents: multi-turn, tool-using rollouts trained with GRPO (environments, tools, MCP, trajectories)."""

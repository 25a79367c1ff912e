"""Agents: multi-turn, tool-using rollouts trained with GRPO (environments, tools, MCP, trajectories).

- kitae.agents.config: the ``environment:`` section (EnvironmentConfig);
- kitae.agents.episodes: the episode loop (run_episodes, Limits);
- kitae.agents.engine: the agent engine the trainer samples with (AgentEngine, agent_engine);
- kitae.agents.chat, kitae.agents.parsers: the model's chat template with tools, tool-call formats (ToolChat);
- kitae.agents.tools, kitae.agents.environments, kitae.agents.http_tools, kitae.agents.mcp: tools (Tools, ToolBox).

Import what you need from those modules; this package imports none of them, so ``kitae.trainer.config`` reading
the ``environment:`` section loads no tool machinery.
"""

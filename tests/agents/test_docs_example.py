"""docs/agents.md's environment example is an environment in TRL's contract that kitae runs as written."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from kitae.agents.tools import ToolBox, environment_tools
from kitae.rollout.trajectory import ToolCall

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def doc_environment():
    """The first Python block of docs/agents.md, run as a module; its Counter class."""
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    namespace: dict = {"__name__": "my_envs"}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace["Counter"]


def test_the_docs_environment_offers_its_method_resets_from_the_row_and_scores_the_episode():
    env = doc_environment()()
    tools = environment_tools(env)
    assert [t.schema["function"]["name"] for t in tools] == ["increment"]
    assert tools[0].schema["function"]["parameters"]["properties"]["by"]["type"] == "integer"
    box = ToolBox(tools, env)

    async def episode():
        text = await box.reset({"target": 3, "messages": [{"role": "user", "content": "count"}], "other": "x"})
        first = await box.call(ToolCall("increment", {"by": 2}))
        second = await box.call(ToolCall("increment", {"by": 1}))
        return text, first, second, await box.reward()

    text, first, second, reward = asyncio.run(episode())
    assert text == "Reach 3 with the increment tool."
    assert (first.result, second.result, first.error) == ("2", "3", None)
    assert reward == 1.0

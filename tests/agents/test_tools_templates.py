"""The schemas kitae builds render in the models' own chat templates (the real files in shared/reference)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from kitae.agents.tools import Tools
from tests.agents.test_tools_environment import CounterEnv

ROOT = Path(__file__).resolve().parents[2]
# The reference templates sit beside the repository (../shared) or in it (shared/, on a test machine's copy)
FOUND = [p for p in (ROOT.parent / "shared" / "reference" / "templates", ROOT / "shared" / "reference" / "templates",
                     ROOT.parents[1] / "shared" / "reference" / "templates") if p.is_dir()]
TEMPLATES = FOUND[0] if FOUND else ROOT.parent / "shared" / "reference" / "templates"
FILES = sorted(TEMPLATES.glob("*.jinja"))


@pytest.mark.skipif(not FILES, reason=f"no chat templates in {TEMPLATES}")
@pytest.mark.parametrize("template", FILES, ids=lambda p: p.stem)
def test_environment_and_builtin_schemas_render_in_real_templates(template):
    schemas = Tools(factory=CounterEnv).schemas + Tools.from_config({"factory": "calculator"}).schemas
    text, _ = render_jinja_template([[{"role": "user", "content": "Reach 5."}]], tools=schemas,
                                    chat_template=template.read_text(), add_generation_prompt=True,
                                    bos_token="<s>", eos_token="</s>")
    text = text[0]
    for name, description in [("increment", "Increment the internal counter."), ("calculator", "Evaluate an")]:
        assert name in text and description in text

"""`kitae` starts at once and its help reads as a person types: no model library on import, readable metavars."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "trl", "datasets", "accelerate", "peft", "kitae.graders", "kitae.store",
         "kitae.web.server", "kitae.http.server")


def test_importing_the_command_loads_no_model_library():
    """`kitae --help` and the start of every command pay for typer and kitae's command modules only; torch,
    transformers and friends load inside the command that needs them (seconds each)."""
    code = ("import json, sys, kitae.cli.main; "
            "print(json.dumps(sorted({m for m in sys.modules for h in %r if m == h or m.startswith(h + '.')})))"
            % (HEAVY,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_the_constants_the_cli_writes_out_are_the_servers():
    from kitae.cli import serve, ui
    from kitae.http import server as http_server
    from kitae.web import server as web_server

    assert (serve.TOKEN_ENV, serve.DEFAULT_MAX_BODY_MB) == (http_server.TOKEN_ENV, http_server.DEFAULT_MAX_BODY_MB)
    assert ui.TOKEN_ENV == web_server.TOKEN_ENV


COMMANDS = [[], ["chat"], ["generate"], ["grade"], ["grader", "validate"], ["train"], ["runs", "show"], ["runs", "samples"],
            ["serve", "rm"], ["serve", "model"], ["plan"], ["ui"], ["curate"], ["eval"], ["merge"], ["long2short", "dpo-pairs"]]


def _help(*command: str) -> str:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    out = subprocess.run([sys.executable, "-m", "kitae.cli.main", *command, "--help"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "kitae")
def test_help_shows_readable_option_metavars(command):
    text = _help(*command)
    start = text.index("Options")
    options = text[start : text.index("╰", start)]  # the options box alone (a command's help may quote <|im_end|>)
    assert not re.findall(r"<[\w\[\], |]+>", options), options  # typer's <bool>, <str>, <list[str]>, <int range>


def test_help_metavars_say_what_to_type():
    train, chat, rm = _help("train"), _help("chat"), _help("serve", "rm")
    assert re.search(r"--set +KEY=VALUE ", train) and re.search(r"--resume +PATH ", train)
    assert re.search(r"--quiet +-q +No progress bar", train)  # a flag: nothing to type after it
    assert re.search(r"--temperature +NUMBER ", chat) and re.search(r"--max-new-tokens +INTEGER ", chat)
    assert re.search(r"--threads +INTEGER \[x>=1\]", chat) and re.search(r"--model +-m +TEXT ", chat)
    assert re.search(r"--dtype +float32\|bfloat16\|float16 ", rm)

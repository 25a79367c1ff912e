"""`kitae serve ...`: serve models over HTTP on the loopback interface.

`kitae serve rm` serves a reward model (for `type: reward_model` graders); `kitae serve model` serves a causal
LM with the OpenAI chat API (for `type: judge`).

    kitae serve rm --model bundled --port 8000
    # then, in a grader spec:  {type: reward_model, url: "http://127.0.0.1:8000"}

The endpoints (kitae's /v1/score, SGLang's /classify, vLLM's /classify and /pooling) are listed in
kitae/rewards/server.py. The first line printed is ``kitae serve rm: serving NAME on http://HOST:PORT``
(with --port 0 the free port chosen), so scripts can wait for it.
"""

from __future__ import annotations

import signal
from pathlib import Path

import typer

from kitae.cli.options import threads_option
from kitae.threads import set_threads

serve_app = typer.Typer(help="Serve models over HTTP: `serve rm` (a reward model), `serve model` (a chat model).",
                        no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(serve_app, name="serve")


@serve_app.command("rm")
def serve_rm(
    model: str = typer.Option("bundled", "--model", help="Reward model folder (a sequence classifier); "
                              "'bundled' = kitae-tiny-rm."),
    port: int = typer.Option(8000, "--port", help="Port on HOST; 0 picks a free one (printed)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (loopback by default)."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Conversations per forward pass."),
    max_length: int = typer.Option(2048, "--max-length", min=8, help="Tokens; longer inputs are cut from the left."),
    device: str = typer.Option("cpu", "--device", help="torch device, e.g. cpu or cuda:1."),
    dtype: str = typer.Option("float32", "--dtype", help="float32, bfloat16 or float16."),
    name: str = typer.Option(None, "--name", help="Model name reported to clients (default: the folder name)."),
    verbose: bool = typer.Option(False, "--verbose", help="Log every request to stderr."),
    threads: int = threads_option(),
) -> None:
    """Serve a local reward model (AutoModelForSequenceClassification) for `type: reward_model` graders."""
    from kitae.errors import ConfigError
    from kitae.rewards.reward_model import LocalRewardModel, resolve_rm_path
    from kitae.rewards.server import make_server

    path = resolve_rm_path(model)
    if not Path(path).is_dir():
        raise ConfigError("--model", f"no model folder at {path!r}; kitae never downloads models")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError("--dtype", f"expected float32, bfloat16 or float16, got {dtype!r}")
    set_threads(threads, path)
    scorer = LocalRewardModel(path, batch_size=batch_size, max_length=max_length, device=device, dtype=dtype)
    _serve(make_server(scorer, host, port, name, quiet=not verbose), "rm", name or scorer.name)


def _serve(server, command: str, name: str) -> None:
    """Print the first line scripts wait for, then serve until Ctrl-C or SIGTERM."""
    bound_host, bound_port = server.server_address[:2]
    signal.signal(signal.SIGTERM, _stop)
    typer.echo(f"kitae serve {command}: serving {name} on http://{bound_host}:{bound_port}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _stop(*_: object) -> None:
    """The first SIGTERM ends the server like Ctrl-C does; a second one ends the process at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise KeyboardInterrupt


@serve_app.command("model")
def serve_model(
    model: str = typer.Option("bundled", "--model", help="A local causal LM folder; 'bundled' = kitae-tiny-base."),
    port: int = typer.Option(8000, "--port", help="Port on HOST; 0 picks a free one (printed)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (loopback by default)."),
    name: str = typer.Option(None, "--name", help="Model name clients send and see (default: the folder name)."),
    max_context: int = typer.Option(None, "--max-context", min=16,
                                    help="Prompt + completion tokens (default: the model's max_position_embeddings)."),
    max_tokens: int = typer.Option(512, "--max-tokens", min=1, help="Completion tokens when a request gives none."),
    device: str = typer.Option("cpu", "--device", help="torch device, e.g. cpu or cuda:1."),
    dtype: str = typer.Option("float32", "--dtype", help="float32, bfloat16 or float16."),
    verbose: bool = typer.Option(False, "--verbose", help="Log every request to stderr."),
    threads: int = threads_option(),
) -> None:
    """Serve a local model with the OpenAI chat API (a local judge for `type: judge`; kitae/serving/server.py)."""
    from kitae.serving.server import load_service, make_server

    set_threads(threads, model)
    service = load_service(None if model == "bundled" else model, name, device, dtype, max_context=max_context,
                           default_max_tokens=max_tokens)
    _serve(make_server(service, host, port, quiet=not verbose), "model", service.name)

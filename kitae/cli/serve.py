"""`kitae serve ...`: serve models over HTTP on the loopback interface.

`kitae serve rm` serves a reward model (for `type: reward_model` graders); `kitae serve model` serves a causal
LM with the OpenAI chat API (for `type: judge`) and vLLM's completions API with continuous batching and a weight
reload endpoint (a rollout server for the `server` engine).

    kitae serve rm --model bundled --port 8000
    # then, in a grader spec:  {type: reward_model, url: "http://127.0.0.1:8000"}

The endpoints (kitae's /v1/score, SGLang's /classify, vLLM's /classify and /pooling) are listed in
kitae/serving/reward_server.py. The first line printed is ``kitae serve rm: serving NAME on http://HOST:PORT``
(with --port 0 the free port chosen), so scripts can wait for it.

Both bind 127.0.0.1 by default; another address needs an access token (``--token``, vLLM's ``--api-key``, or
KITAE_SERVE_TOKEN), which every request then sends as ``Authorization: Bearer TOKEN``. On loopback, a request
whose Host is not a loopback name is refused (DNS rebinding), and every POST must be JSON
(``Content-Type: application/json``) from no other web origin (kitae/http/server.py). Request bodies are limited by
``--max-body-mb``, and the work of one request by ``--max-items``/``--max-chars`` (rm) or the context (model).
"""

from __future__ import annotations

import os
import signal
from typing import Literal, Optional

import typer

from kitae.cli.options import template_kwargs_option, template_kwargs_of, threads_option
from kitae.quantization import QUANTIZE_HELP, from_flag
from kitae.threads import set_threads

# kitae.http.server's TOKEN_ENV and DEFAULT_MAX_BODY_MB, written out so `kitae --help` does not import the HTTP
# server (tests/test_cli_startup.py holds them equal)
TOKEN_ENV = "KITAE_SERVE_TOKEN"
DEFAULT_MAX_BODY_MB = 8.0

HOST_HELP = "Interface to listen on (loopback by default); any other address needs --token."
TOKEN_HELP = (f"Access token every request must send as 'Authorization: Bearer TOKEN' (default: ${TOKEN_ENV}); "
              "16 characters or more. --api-key is the same option (vLLM's name).")
BODY_HELP = "Largest request body in MB; larger ones get HTTP 413."
Dtype = Literal["float32", "bfloat16", "float16"]  # typer refuses any other value before the command runs
Quantize = Literal["none", "nf4", "fp4", "int8"]  # kitae.quantization.QUANTIZE_FLAG


serve_app = typer.Typer(help="Serve models over HTTP: `serve rm` (a reward model), `serve model` (a judge or a "
                             "rollout server).",
                        no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(serve_app, name="serve")


@serve_app.command("rm")
def serve_rm(
    model: str = typer.Option("bundled", "--model", help="Reward model folder or Hub id (a sequence classifier); "
                              "'bundled' = kitae-tiny-rm."),
    port: int = typer.Option(8000, "--port", help="Port on HOST; 0 picks a free one (printed)."),
    host: str = typer.Option("127.0.0.1", "--host", help=HOST_HELP),
    token: Optional[str] = typer.Option(None, "--token", "--api-key", help=TOKEN_HELP, show_default=False),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Conversations per forward pass."),
    max_length: int = typer.Option(2048, "--max-length", min=8, help="Tokens; longer inputs are cut from the left."),
    max_items: int = typer.Option(256, "--max-items", min=1,
                                  help="Texts or conversations per request; more get HTTP 400."),
    max_chars: int = typer.Option(32_000, "--max-chars", min=1,
                                  help="Characters per text or conversation; longer ones get HTTP 400."),
    max_body_mb: float = typer.Option(DEFAULT_MAX_BODY_MB, "--max-body-mb", min=0.001, help=BODY_HELP),
    device: str = typer.Option("cpu", "--device", help="torch device, e.g. cpu or cuda:1."),
    dtype: Dtype = typer.Option("float32", "--dtype", help="The weights' dtype."),
    quantize: Quantize = typer.Option("none", "--quantize", help=QUANTIZE_HELP),
    name: str = typer.Option(None, "--name", help="Model name reported to clients (default: the folder name)."),
    verbose: bool = typer.Option(False, "--verbose", help="Log every request to stderr."),
    threads: int = threads_option(),
) -> None:
    """Serve a reward model (AutoModelForSequenceClassification: a folder or Hub id) for reward_model graders."""
    from kitae.models import model_folder
    from kitae.rewards.reward_model import LocalRewardModel, resolve_rm_path
    from kitae.serving.reward_server import make_server
    from kitae.http.server import HttpLimits

    token = _token(token, host, "let anyone on the network use this reward model")
    path = model_folder(resolve_rm_path(model), "--model")
    set_threads(threads, path)
    scorer = LocalRewardModel(path, batch_size=batch_size, max_length=max_length, device=device, dtype=dtype,
                              quantization=from_flag(quantize))
    server = make_server(scorer, host, port, name, quiet=not verbose, token=token,
                         limits=HttpLimits.from_mb(max_body_mb), max_items=max_items, max_chars=max_chars)
    _serve(server, "rm", name or scorer.name)


def _token(token: str | None, host: str, exposes: str) -> str | None:
    """The access token (the flag, else the environment), checked against the host before any model loads."""
    from kitae.http.server import check_bind

    token = token or os.environ.get(TOKEN_ENV) or None
    check_bind(host, token, TOKEN_ENV, exposes)
    return token


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
    model: str = typer.Option("bundled", "--model", help="A causal LM folder, Hub id or LoRA adapter folder (its base, quantized as trained, + the adapter); 'bundled' = kitae-tiny-base."),
    port: int = typer.Option(8000, "--port", help="Port on HOST; 0 picks a free one (printed)."),
    host: str = typer.Option("127.0.0.1", "--host", help=HOST_HELP),
    token: Optional[str] = typer.Option(None, "--token", "--api-key", help=TOKEN_HELP, show_default=False),
    name: str = typer.Option(None, "--name", help="Model name clients send and see (default: the folder name)."),
    max_context: int = typer.Option(None, "--max-context", min=16,
                                    help="Prompt + completion tokens (default: the model's max_position_embeddings)."),
    max_tokens: int = typer.Option(512, "--max-tokens", min=1, help="Completion tokens when a request gives none."),
    max_batch: int = typer.Option(64, "--max-batch", min=1,
                                  help="Samples decoded together (continuous batching: requests join the running "
                                       "batch); 1 = one request at a time."),
    max_body_mb: float = typer.Option(DEFAULT_MAX_BODY_MB, "--max-body-mb", min=0.001, help=BODY_HELP),
    device: str = typer.Option("cpu", "--device", help="torch device, e.g. cpu or cuda:1."),
    dtype: Dtype = typer.Option("float32", "--dtype", help="The weights' dtype."),
    quantize: Quantize = typer.Option("none", "--quantize", help=QUANTIZE_HELP),
    verbose: bool = typer.Option(False, "--verbose", help="Log every request to stderr."),
    chat_template_kwargs: str = template_kwargs_option(
        "The chat template's variables for chat requests, a JSON object (e.g. '{\"enable_thinking\": false}' for "
        "Qwen3); a request's chat_template_kwargs go over them."),
    threads: int = threads_option(),
) -> None:
    """Serve a local causal LM: a judge (`type: judge`) or a rollout server (`sampling.engine: server`).

    POST /v1/chat/completions: OpenAI chat, with JSON-schema constrained output, logprobs and top_logprobs.
    POST /v1/completions: vLLM's; token-id prompts, n, per-token log-probs (logprobs k: the k most likely too)
    and token ids.
    POST /update_weights_from_disk: SGLang's; {"model_path": FOLDER} loads its safetensors.
    POST /v1/load_lora_adapter, /v1/unload_lora_adapter: vLLM's; {"lora_name", "lora_path"} loads a peft LoRA
    adapter onto the base, which samples with it (requests name it as the model).
    GET /health (with weight_version), GET /v1/models, GET /v1/models/NAME.

    Concurrent requests share one continuously batched decoder (kitae/serving/server.py).
    """
    from kitae.models import resolve_model_path

    token = _token(token, host, "let anyone on the network use this model")
    path = resolve_model_path(model, "--model", adapter=True)  # before torch: a wrong path fails at once
    from kitae.http.server import HttpLimits
    from kitae.serving.server import load_service, make_server

    kwargs = template_kwargs_of(chat_template_kwargs)
    set_threads(threads, path)
    service = load_service(path, name, device, dtype, from_flag(quantize), max_context=max_context,
                           default_max_tokens=max_tokens, max_batch=max_batch, chat_template_kwargs=kwargs)
    server = make_server(service, host, port, quiet=not verbose, token=token, limits=HttpLimits.from_mb(max_body_mb))
    try:
        _serve(server, "model", service.name)
    finally:
        service.close()

"""Saving labels in a run folder that cannot be written answers a clear JSON error that the labeling page shows,
never a 500 (the error names labels.jsonl and the fix).

The folder is made truly read-only for the server: it runs in a child process with a private mount namespace
(``unshare -rm``) where the runs folder is a read-only bind mount, which stops root too (``chmod`` would not);
a user who is not root without user namespaces gets ``chmod a-w`` instead (EACCES, where the mount gives EROFS).
The test talks to that server over real HTTP on loopback and drives the page in real Chromium.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.plugins.read_only import _unshare_works

REPO = Path(__file__).resolve().parents[2]
SERVER = """
import sys
from kitae.web import make_server
server = make_server(sys.argv[1], port=0)
print(server.url, flush=True)
server.serve_forever()
"""


@pytest.fixture
def read_only_server(fresh_runs, tmp_path):
    """The run page over `fresh_runs`, served by a process that cannot write there. Yields its URL."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
    python = [sys.executable, "-c", SERVER, str(fresh_runs)]
    restore: dict[Path, int] = {}
    (tmp_path / "probe").mkdir()
    if _unshare_works(tmp_path / "probe"):
        folder = shlex.quote(str(fresh_runs))
        command = ["unshare", "-rm", "sh", "-c",
                   f"mount --bind -o ro {folder} {folder} && exec {shlex.join(python)}"]
    elif os.geteuid() != 0:
        restore = {p: p.stat().st_mode for p in [fresh_runs, *fresh_runs.rglob("*")]}
        for p, mode in restore.items():
            p.chmod(mode & ~0o222)
        command = python
    else:
        pytest.skip("root without user namespaces (unshare -rm): no way to make a folder read-only for the server")
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), server.stderr.read()
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
        for p, mode in restore.items():
            p.chmod(mode)


def test_post_labels_to_a_read_only_run_is_a_clear_error(read_only_server, fresh_runs):
    labels = fresh_runs / "finished-run" / "labels.jsonl"
    with httpx.Client(base_url=read_only_server, timeout=10) as http:
        groups = http.get("/api/runs/finished-run/groups?step=1&order=step").json()["groups"]
        assert http.get("/api/runs/finished-run").status_code == 200  # reading works: only the write fails
        r = http.post("/api/runs/finished-run/labels",
                      json={"labels": [{"group_id": groups[0]["id"], "sample_index": 0, "score": 4}]})
    assert r.status_code == 503, r.text
    error = r.json()["error"]
    assert error.startswith(f"cannot save your labels: {labels} ") and "read-only" in error, error
    assert "copy the run folder" in error
    assert not labels.exists()


def test_the_labeling_page_shows_why_the_labels_were_not_saved(read_only_server, fresh_runs, browser):
    ctx = browser.new_context()
    page = ctx.new_page()
    failures: list[str] = []  # uncaught script errors (an unhandled failed save was one); the 503 itself is logged
    page.on("pageerror", lambda exc: failures.append(str(exc)))
    try:
        page.goto(read_only_server + "#/run/finished-run/label")
        page.wait_for_selector("article.sample", timeout=15_000)
        page.locator('article.sample[data-index="0"] button[data-score="4"]').click()
        page.locator("button", has_text="Save my scores").click()
        shown = page.wait_for_selector(".save-status.error", timeout=15_000).text_content()
        assert "cannot save your labels" in shown and "read-only" in shown, shown
        assert page.locator("article.sample .reward").count() == 0  # not revealed: nothing was saved
    finally:
        ctx.close()
    assert not failures, failures
    assert not (fresh_runs / "finished-run" / "labels.jsonl").exists()

"""An editor ends ``mplint server`` with shutdown then exit: status 0, nothing on standard error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("pygls")


def _message(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


@pytest.mark.parametrize("shutdown_first", [True, False])
def test_shutdown_and_exit_end_the_server_cleanly(tmp_path, shutdown_first):
    server = subprocess.Popen(
        [sys.executable, "-m", "mplint", "server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}},
        },
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
    ]
    if shutdown_first:
        messages.append({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
    messages.append({"jsonrpc": "2.0", "method": "exit"})
    server.stdin.write(b"".join(map(_message, messages)))
    server.stdin.flush()  # standard input stays open, as an editor keeps it
    try:
        code = server.wait(timeout=60)
    finally:
        server.kill()
    assert server.stderr.read().decode() == ""  # no traceback either way
    if shutdown_first:
        assert code == 0

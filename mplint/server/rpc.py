"""JSON-RPC 2.0 with LSP's framing (``Content-Length`` headers) over a pair of byte streams."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from typing import BinaryIO

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_NOT_INITIALIZED = -32002
REQUEST_CANCELLED = -32800


class Connection:
    def __init__(self, reader: BinaryIO, writer: BinaryIO):
        self.reader, self.writer = reader, writer
        self.lock = threading.Lock()  # answers come from several threads
        self.ids = itertools.count(1)
        self.waiting: dict[int, Callable[[dict], None]] = {}  # our requests' ids -> what to do with the answer

    def read(self) -> dict | None:
        """The next message, ``None`` when the stream ends."""
        length = None
        while True:
            header = self.reader.readline()
            if not header:
                return None
            header = header.strip()
            if not header:
                break
            name, _, value = header.decode("ascii").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if length is None:
            return None
        body = self.reader.read(length)
        return json.loads(body) if len(body) == length else None

    def write(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        with self.lock:
            self.writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            self.writer.flush()

    def respond(self, id_, result=None) -> None:
        self.write({"id": id_, "result": result})

    def fail(self, id_, code: int, message: str) -> None:
        self.write({"id": id_, "error": {"code": code, "message": message}})

    def notify(self, method: str, params) -> None:
        self.write({"method": method, "params": params})

    def request(self, method: str, params, on_answer: Callable[[dict], None] | None = None) -> None:
        """Ask the client; ``on_answer`` gets the answer message (``result`` or ``error``) when it comes."""
        id_ = next(self.ids)
        if on_answer is not None:
            self.waiting[id_] = on_answer
        self.write({"id": id_, "method": method, "params": params})

    def answered(self, message: dict) -> None:
        callback = self.waiting.pop(message.get("id"), None)
        if callback is not None:
            callback(message)

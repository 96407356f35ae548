"""A broker in a child process, one node of a cluster over one store."""

from __future__ import annotations

import subprocess
from typing import Any

import httpx

from s3q.broker import spawn


class Node:
    """``s3q.broker.serve`` in a child process."""

    def __init__(self, store: str, options: dict[str, Any], **settings: Any) -> None:
        self.store, self.options = store, options
        self.proc, self.url = spawn(store, options=options, **settings)
        tokens = settings.get("tokens")
        self.headers = {"authorization": f"Bearer {min(tokens)}"} if tokens else {}

    def led(self) -> list[str]:
        """The queues this broker leads."""
        return list(httpx.get(self.url + "/v1/queues", headers=self.headers).json()["queues"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

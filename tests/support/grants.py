"""What the tests of principals and grants share: principals files, calls made as a principal
on each route of a broker (native, SQS in both protocols, subscriptions), and the store's
bytes to compare before and after a refused call."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import msgspec
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from s3q.wire import subscriptions as frames

MSGPACK = "application/msgpack"
pack = msgspec.msgpack.encode
ACTIONS = ("send", "receive", "read", "admin")


def hashed(token: str) -> str:
    """A bearer token as a principals file holds it."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def principal(
    name: str,
    grants: list[dict[str, Any]],
    tokens: tuple[str, ...] = (),
    keys: dict[str, str] | None = None,
) -> str:
    """One principal's table in a principals file."""
    lines = [f"[principals.{name}]"]
    if tokens:
        lines.append("tokens = [" + ", ".join(json.dumps(hashed(t)) for t in tokens) + "]")
    if keys:
        entries = ", ".join(
            f"{{ id = {json.dumps(k)}, secret = {json.dumps(v)} }}" for k, v in keys.items()
        )
        lines.append(f"sqs_keys = [{entries}]")
    lines.append("grants = [")
    for grant in grants:
        fields = ", ".join(f"{k} = {json.dumps(v)}" for k, v in grant.items())
        lines.append(f"  {{ {fields} }},")
    lines.append("]")
    return "\n".join(lines) + "\n"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


NATIVE: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "send": ("POST", "enqueue", {"payload": b"m"}),
    "receive": ("POST", "dequeue", {"max_messages": 1}),
    "read": ("GET", "stats", None),
    "admin": ("POST", "configure", {"settings": {"max_attempts": 7}}),
}


def native(
    url: str, token: str | None, queue: str, action: str, *, chunked: bool = False
) -> httpx.Response:
    """The native call of ``action``'s class on ``queue`` (``chunked``: its body sent in
    chunks, which the lean path leaves to the generic stack)."""
    method, operation, body = NATIVE[action]
    headers = {"content-type": MSGPACK, "accept": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    path = f"{url}/v1/queues/{queue}/{operation}"
    if body is None:
        return httpx.request(method, path, headers=headers, timeout=30)
    content = pack(body)
    sent: Any = iter([content]) if chunked else content
    return httpx.request(method, path, content=sent, headers=headers, timeout=30)


def sqs_params(action: str, queue_url: str, query: bool) -> tuple[str, dict[str, Any]]:
    """The SQS action of ``action``'s class and its parameters, in either protocol's form."""
    if action == "send":
        return "SendMessage", {"QueueUrl": queue_url, "MessageBody": "m"}
    if action == "receive":
        return "ReceiveMessage", {"QueueUrl": queue_url, "MaxNumberOfMessages": 1}
    if action == "read":
        names = {"AttributeName.1": "All"} if query else {"AttributeNames": ["All"]}
        return "GetQueueAttributes", {"QueueUrl": queue_url, **names}
    if query:
        attributes = {"Attribute.1.Name": "VisibilityTimeout", "Attribute.1.Value": "31"}
        return "SetQueueAttributes", {"QueueUrl": queue_url, **attributes}
    return "SetQueueAttributes", {"QueueUrl": queue_url, "Attributes": {"VisibilityTimeout": "31"}}


def sqs(
    url: str, key: str, secret: str, action: str, params: dict[str, Any], *, query: bool = False
) -> httpx.Response:
    """An SQS request signed as botocore signs it (``query``: the query protocol)."""
    if query:
        body = urlencode({"Action": action, "Version": "2012-11-05", **params}).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
    else:
        body = json.dumps(params).encode()
        headers = {
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": f"AmazonSQS.{action}",
        }
    signing = AWSRequest("POST", url + "/", data=body, headers=headers)
    SigV4Auth(Credentials(key, secret), "sqs", "us-east-1").add_auth(signing)
    return httpx.post(url + "/", content=body, headers=dict(signing.headers.items()), timeout=30)


def subscribe(url: str, token: str, queue: str) -> frames.ServerFrame:
    """Open a subscription to ``queue``: the broker's first frame (opened, or refused)."""
    ws_url = url.replace("http://", "ws://") + f"/v1/queues/{queue}/subscribe"
    headers = {"authorization": f"Bearer {token}"}
    with ws_connect(ws_url, additional_headers=headers, open_timeout=10) as ws:
        with contextlib.suppress(ConnectionClosed):  # (refused before it could be sent)
            ws.send(frames.encode(frames.Open(prefetch=1)))
        data = ws.recv(timeout=10)
        assert isinstance(data, bytes)
        return frames.decode_server(data)

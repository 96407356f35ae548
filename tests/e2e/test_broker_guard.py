"""Web pages cannot use a broker: a page of another origin cannot purge a queue with a "simple"
request (no preflight), and a page whose DNS name resolves to 127.0.0.1 (DNS rebinding) cannot
read payloads. Headless Chromium plays the page; a broker without tokens, on loopback."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from broker_harness import TOKEN, Broker
from chromium import chromium_path
from conftest import free_port
from playwright.sync_api import Browser, sync_playwright

from s3q.client import connect

PAGE = b"<!doctype html><title>elsewhere</title><p>a page of another origin"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=chromium_path(),
            headless=True,
            # "rebound.example" names 127.0.0.1, as a rebound DNS name would
            args=[
                "--headless",
                "--no-sandbox",
                "--host-resolver-rules=MAP rebound.example 127.0.0.1",
            ],
        )
        yield b
        b.close()


@pytest.fixture
def elsewhere() -> Iterator[str]:
    """A page on another origin (another port of 127.0.0.1)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(f"file://{tmp_path}/store") as b:
        with connect(b.url) as client:
            client.queue("victim").enqueue_batch([b"secret-1", b"secret-2"])
        yield b


def pending(broker: Broker) -> int:
    with connect(broker.url) as client:
        return client.queue("victim").stats().pending


def test_a_page_of_another_origin_cannot_purge_a_queue(
    browser: Browser, elsewhere: str, broker: Broker
) -> None:
    page = browser.new_page()
    try:
        page.goto(elsewhere)
        for content_type in ("text/plain", "application/x-www-form-urlencoded"):
            # a simple request: the browser sends it without asking the broker first
            sent = page.evaluate(
                """async ([url, type]) => {
                    await fetch(url, {method: "POST", mode: "no-cors",
                                      headers: {"Content-Type": type}, body: ""});
                    return true;
                }""",
                [f"{broker.url}/v1/queues/victim/purge", content_type],
            )
            assert sent
    finally:
        page.close()
    assert pending(broker) == 2


def test_a_rebound_dns_name_cannot_read_payloads(browser: Browser, broker: Broker) -> None:
    page = browser.new_page()
    try:
        answer = page.goto(f"http://rebound.example:{broker.port}/v1/queues/victim/peek")
        assert answer is not None and answer.status == 400
        assert "secret" not in page.content()
    finally:
        page.close()
    assert pending(broker) == 2


def test_foreign_origins_and_hosts_and_body_types_are_refused(broker: Broker) -> None:
    purge = f"{broker.url}/v1/queues/victim/purge"
    json = {"content-type": "application/json"}
    foreign = httpx.post(purge, headers={**json, "origin": "http://evil.example"})
    assert foreign.status_code == 403 and "http://evil.example" in foreign.json()["message"]
    assert httpx.post(purge, headers={**json, "origin": "null"}).status_code == 403
    assert httpx.post(purge, headers={**json, "host": "attacker.example"}).status_code == 400
    plain = httpx.post(purge, headers={"content-type": "text/plain"})
    assert plain.status_code == 400 and "content-type" in plain.json()["message"]
    assert httpx.post(purge).status_code == 400  # no type at all
    assert pending(broker) == 2
    # the broker's own origin, a loopback name, and a proper type are served
    own = {**json, "origin": broker.url}
    assert httpx.get(f"{broker.url}/v1/queues/victim/stats", headers=own).status_code == 200
    local = f"http://localhost:{broker.port}/v1/queues/victim/stats"
    assert httpx.get(local).status_code == 200
    assert httpx.post(purge, headers=json).json() == {"removed": 2}


def test_with_tokens_any_host_name_is_served(tmp_path: Path) -> None:
    """A broker with tokens listens beyond loopback, under whatever name reaches it."""
    with Broker(f"file://{tmp_path}/store", tokens={TOKEN}) as b:
        answer = httpx.get(
            f"{b.url}/v1/queues",
            headers={"host": "broker.internal", "authorization": f"Bearer {TOKEN}"},
        )
        assert answer.status_code == 200

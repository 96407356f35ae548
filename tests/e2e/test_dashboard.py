"""The broker's dashboard in headless Chromium: a real broker on 127.0.0.1, real sockets.

Needs Debian's ``chromium`` (``apt-get install -y chromium``; .ci/run installs it) or a browser
named by ``$S3Q_CHROMIUM``; without one these tests fail, they are not skipped.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import broker_harness
import httpx
import pytest
from broker_harness import TOKEN, Broker
from chromium import chromium_path
from conftest import MotoServer, child_env
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

import s3q
from s3q.broker.dashboard import STATIC
from s3q.client import Client, connect
from s3q.prices import Prices

# one worker runs them all (pytest-xdist, --dist loadgroup): one Chromium, not one per worker
pytestmark = pytest.mark.xdist_group("dashboard")


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    b = playwright.chromium.launch(
        executable_path=chromium_path(), headless=True, args=["--headless", "--no-sandbox"]
    )
    yield b
    b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()  # a fresh sessionStorage for each test
    p = context.new_page()
    p.set_default_timeout(15_000)
    errors: list[tuple[float, str]] = []  # (when, what)
    p.on("pageerror", lambda exc: errors.append((time.monotonic(), str(exc))))
    p.on(
        "console",
        lambda msg: errors.append((time.monotonic(), msg.text)) if msg.type == "error" else None,
    )
    began = time.monotonic()
    yield p
    context.close()
    # 401/403 answers are logged by the browser as failed loads, and so is a poll of a broker
    # the test stopped before the page closed; anything else is a bug
    stopped = broker_harness.stopping_since
    gone = stopped if stopped >= began else float("inf")
    assert [
        e
        for at, e in errors
        if "status of 40" not in e and not (at >= gone and "ERR_CONNECTION_REFUSED" in e)
    ] == []


def cell(page: Page, queue: str, field: str) -> str:
    return f'#queues tr[data-queue="{queue}"] td[data-field="{field}"]'


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"file://{tmp_path}/store"


def test_page_shows_queue_figures(store: str, page: Page) -> None:
    with s3q.open(f"{store}/other") as other:  # a queue of the store the broker has not opened
        other.enqueue(b"waiting")
    with Broker(store) as broker, connect(broker.url) as client:
        q = client.queue("jobs")
        q.enqueue_batch([b"a", b"b", b"c", b"d", b"e"])
        q.enqueue(b"later", delay=600)
        q.enqueue(b"f")
        page.goto(broker.url + "/")
        expect(page.locator(cell(page, "jobs", "pending"))).to_have_text("6")
        stats = q.stats()
        assert stats.pending == 6
        expect(page.locator(cell(page, "jobs", "delayed"))).to_have_text(str(stats.delayed))
        expect(page.locator(cell(page, "jobs", "total_enqueued"))).to_have_text("7")
        expect(page.locator("#store")).to_have_text(store)

        [msg] = q.dequeue()
        expect(page.locator(cell(page, "jobs", "processing"))).to_have_text("1")
        q.complete(msg)
        expect(page.locator(cell(page, "jobs", "completed"))).to_have_text("1")
        expect(page.locator(cell(page, "jobs", "pending"))).to_have_text("5")
        # the charts: commit latency of the requests above, throughput from two polls on
        expect(page.locator("#chart-latency path.p99")).to_have_count(1)
        expect(page.locator("#lat-p50")).to_contain_text("ms")
        expect(page.locator("#chart-throughput path.enq")).to_have_count(1)
        expect(page.locator("#conn")).to_have_text("live")

        # a queue of the store can be opened by name; it becomes the selected one
        page.fill("#open-name", "other")
        page.click("#open-form button")
        expect(page.locator(cell(page, "other", "pending"))).to_have_text("1")
        expect(page.locator('#queues tr.selected[data-queue="other"]')).to_have_count(1)
        assert client.queues() == ["jobs", "other"]
        # a name the store does not hold is refused, and no queue is made of it
        page.fill("#open-name", "ghost")
        page.click("#open-form button")
        expect(page.locator("#open-error")).to_contain_text("no queue named 'ghost'")
        assert client.queues() == ["jobs", "other"]


def make_dead(client: Client, name: str, errors: list[str]) -> list[str]:
    """Messages of queue ``name`` (max_attempts 1) failed once each with ``errors``."""
    q = client.queue(name)
    ids = q.enqueue_batch([f"payload {e}".encode() for e in errors])
    for error in errors:
        [msg] = q.dequeue()
        q.fail(msg, error)
    assert q.stats().dead == len(errors)
    return ids


def test_dead_letter_browser_and_redrive(store: str, page: Page) -> None:
    with Broker(store, max_attempts=1) as broker, connect(broker.url) as client:
        first, second, third = make_dead(client, "mail", ["smtp down", "bad address", "quota"])
        client.queue("mail").enqueue(b"\xff\x00binary")
        page.goto(broker.url + "/")
        rows, result = page.locator("#dead tbody tr"), page.locator("#dlq-result")
        expect(rows).to_have_count(3)
        row = page.locator(f'#dead tr[data-id="{second}"]')
        expect(row.locator("td.err")).to_have_text("bad address")
        expect(row.locator("td.payload")).to_have_text("payload bad address")
        expect(row.locator("td.num")).to_have_text("1")
        expect(page.locator(cell(page, "mail", "dead"))).to_have_text("3")

        row.locator("input[type=checkbox]").check()
        page.click("#redrive-selected")
        expect(result).to_have_text("Moved 1 message(s) of mail back to pending.")
        expect(rows).to_have_count(2)
        q = client.queue("mail")
        stats = q.stats()
        assert (stats.dead, stats.pending) == (2, 2)
        assert q.status(second).value == "pending"
        expect(page.locator(cell(page, "mail", "pending"))).to_have_text("2")

        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#redrive-all")
        expect(result).to_have_text("Moved 2 message(s) of mail back to pending.")
        expect(rows).to_have_count(0)
        stats = q.stats()
        assert (stats.dead, stats.pending) == (0, 4)
        assert {q.status(i).value for i in (first, third)} == {"pending"}
        expect(page.locator(cell(page, "mail", "dead"))).to_have_text("0")
        expect(page.locator("#redrive-all")).to_be_disabled()


def test_dead_letter_appears_while_watching(store: str, page: Page) -> None:
    with Broker(store, max_attempts=1) as broker, connect(broker.url) as client:
        q = client.queue("jobs")
        q.enqueue(b"\xff\x00")
        page.goto(broker.url + "/")
        expect(page.locator("#dlq-note")).to_have_text("No dead letters.")
        [msg] = q.dequeue()
        q.fail(msg, "it broke")
        expect(page.locator("#dead tbody tr td.err")).to_have_text("it broke")
        expect(page.locator("#dead tbody tr td.payload")).to_have_text("binary, 2 bytes: ff 00")


def test_tokens_guard_data_and_redrive(store: str, page: Page) -> None:
    with Broker(store, tokens={TOKEN}, max_attempts=1) as broker:
        with connect(broker.url, token=TOKEN) as client:
            [dead] = make_dead(client, "secretq", ["nope"])
        # the API refuses the page's requests without a valid token, and changes nothing
        with httpx.Client(base_url=broker.url) as http:
            assert http.get("/").status_code == 200  # the shell holds no data
            assert http.get("/dashboard/summary").status_code == 401
            bad = {"Authorization": "Bearer wrong"}
            assert http.get("/dashboard/summary", headers=bad).status_code == 403
            assert http.post("/v1/queues/secretq/redrive", json={}).status_code == 401
            assert http.post("/v1/queues/secretq/redrive", json={}, headers=bad).status_code == 403
        page.goto(broker.url + "/")
        expect(page.locator("#login")).to_be_visible()
        expect(page.locator("#content")).to_be_hidden()
        assert "secretq" not in page.content()
        assert page.locator("#queues tbody tr").count() == 0

        page.fill("#token", "wrong")
        page.click("#login-form button")
        expect(page.locator("#login-error")).to_have_text("That token was refused.")
        expect(page.locator("#content")).to_be_hidden()

        page.fill("#token", TOKEN)
        page.click("#login-form button")
        expect(page.locator(cell(page, "secretq", "dead"))).to_have_text("1")
        expect(page.locator(f'#dead tr[data-id="{dead}"] td.err')).to_have_text("nope")
        page.reload()  # the token stays for the tab's session
        expect(page.locator(cell(page, "secretq", "dead"))).to_have_text("1")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#redrive-all")
        expect(page.locator(cell(page, "secretq", "pending"))).to_have_text("1")

        page.click("#signout")
        expect(page.locator("#login")).to_be_visible()
        assert page.locator("#queues tbody tr").count() == 0
        assert page.evaluate("sessionStorage.length") == 0
        with connect(broker.url, token=TOKEN) as client:
            assert client.queue("secretq").stats().pending == 1


def test_static_files_and_headers(store: str) -> None:
    assert {p.name for p in STATIC.iterdir()} >= {"index.html", "dashboard.js", "dashboard.css"}
    with Broker(store) as broker, httpx.Client(base_url=broker.url) as http:
        index = http.get("/")
        assert index.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in index.headers["content-security-policy"]
        assert "/dashboard/static/dashboard.js" in index.text
        js = http.get("/dashboard/static/dashboard.js")
        assert js.headers["content-type"].startswith("text/javascript")
        assert http.get("/dashboard/static/nope.js").status_code == 404
        assert http.get("/dashboard/static/..%2Fapp.py").status_code == 404
        summary = http.get("/dashboard/summary").json()
        assert summary["queues"] == [] and summary["auth"] is False
        assert summary["commit_latency"]["p50"] is None


def test_the_dashboard_reckons_what_the_store_requests_cost(
    moto_server: MotoServer, s3_bucket: str, tmp_path: Path, page: Page
) -> None:
    """On S3, at prices of the broker's choosing: the summary's spend is the broker's requests
    (its queues' and its lease's) at those prices, the page shows it with a monthly rate, and
    /metrics has the same figures."""
    store = f"s3://{s3_bucket}/{tmp_path.name}"
    prices = Prices(put=1.0, get=0.1)
    options = moto_server.store_options()
    with Broker(store, prices=prices, **options) as broker, connect(broker.url) as client:
        q = client.queue("billed")
        for i in range(5):
            q.enqueue(b"m%d" % i)
        with httpx.Client(base_url=broker.url) as http:
            cost = http.get("/dashboard/summary").json()["cost"]
            metrics = http.get("/metrics").text
        requests = cost["requests"]
        assert requests["put"] >= 6  # the broker lease, the queue's lease and log, 5 commits
        assert requests["all"] == sum(requests[k] for k in ("put", "get", "list", "delete"))
        expected = ((requests["put"] + requests["list"]) * 1.0 + requests["get"] * 0.1) / 1000
        assert cost["dollars"] == pytest.approx(expected)
        assert cost["per_month"] > 0 and (cost["put_price"], cost["get_price"]) == (1.0, 0.1)
        assert cost["store_kind"] == "object store"
        assert 's3q_queue_store_requests{kind="list",queue="billed"}' in metrics
        dollars = next(
            line for line in metrics.splitlines() if line.startswith("s3q_broker_store_dollars ")
        )
        assert float(dollars.split()[1]) >= cost["dollars"]

        page.goto(broker.url + "/")
        expect(page.locator("#cost")).to_contain_text("a month at the rate of the last")
        expect(page.locator("#cost")).to_contain_text("at $1 per 1,000 PUT or LIST")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tests keep screenshots of the page: ``$S3Q_SCREENSHOTS``, else a directory of
    pytest's temporary ones; printed (``pytest -s``, or ``-rP`` for the passed tests')."""
    given = os.environ.get("S3Q_SCREENSHOTS")
    where = Path(given) if given else tmp_path_factory.mktemp("dashboard-screenshots")
    where.mkdir(parents=True, exist_ok=True)
    print(f"dashboard screenshots: {where}")
    return where


SCENE = ("orders", "emails", "thumbnails-for-the-product-catalogue")  # the last one long


def busy_queues(client: Client) -> None:
    """The scene a user meets: three queues that have seen traffic, each with dead letters
    (the broker's ``max_attempts`` is 1)."""
    for name in SCENE:
        q = client.queue(name)
        for i in range(5):
            q.enqueue_batch([b"%s %d" % (name.encode(), i)] * 40)
            q.complete_batch(q.dequeue(max_messages=30))
        for msg in q.dequeue(max_messages=2):
            q.fail(msg, "it broke")


def history(broker: Broker) -> dict[str, list[list[float]]]:
    """The throughput history the broker kept, by queue: [[t, total_enqueued, finished]]."""
    summary = httpx.get(broker.url + "/dashboard/summary?history=1").json()
    return summary["history"]["queues"]


def grew(samples: list[list[float]]) -> bool:
    """Whether ``samples`` show messages enqueued between two of them."""
    return any(b[1] > a[1] for a, b in itertools.pairwise(samples))


def marks(page: Page, chart: str, cls: str) -> list[float]:
    """The values' heights (0 at the bottom of the plot) of series ``cls`` drawn on ``chart``:
    the points of its line and its lone dots."""
    return page.evaluate(
        r"""([chart, cls]) => {
            const svg = document.getElementById(chart);
            const bottom = 200 - 22;  // drawChart's plot
            const ys = [];
            for (const path of svg.querySelectorAll(`path.${cls}`)) {
                for (const m of path.getAttribute("d").matchAll(/[ML][\d.]+,([\d.]+)/g)) {
                    ys.push(bottom - Number(m[1]));
                }
            }
            return ys;
        }""",
        [chart, cls],
    )


def test_charts_show_the_minutes_before_the_page_opened(
    store: str, page: Page, shots: Path
) -> None:
    """The broker samples every queue's counters itself, so a page opened after the traffic
    stopped draws it at once: throughput from the broker's history, commit latency from its
    window (a lone 5-second step drawn as a dot)."""
    with Broker(store, max_attempts=1) as broker, connect(broker.url) as client:
        busy_queues(client)
        # traffic until the broker's sampler has seen it grow (it samples every second)
        q = client.queue("orders")
        deadline = time.monotonic() + 30
        while not grew(history(broker).get("orders", [])):
            assert time.monotonic() < deadline, history(broker)
            q.enqueue_batch([b"more"] * 10)
            q.complete_batch(q.dequeue(max_messages=10))
        stopped = client.queue("orders").stats().total_enqueued
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.goto(broker.url + "/#orders")
        expect(page.locator("#conn")).to_have_text("live")
        # traffic stopped before the page opened: only the broker's history has it above zero
        throughput = page.locator("#chart-throughput path.enq")
        expect(throughput).to_have_attribute("data-points", re.compile(r"^[1-9]\d*$"))
        assert max(marks(page, "chart-throughput", "enq")) > 0
        assert max(marks(page, "chart-throughput", "fin")) > 0
        expect(page.locator("#chart-latency path.p99")).to_have_attribute(
            "data-points", re.compile(r"^[1-9]\d*$")
        )
        lone = page.locator("#chart-latency circle.p99").count()
        assert lone or "L" in (page.locator("#chart-latency path.p99").get_attribute("d") or "")
        assert client.queue("orders").stats().total_enqueued == stopped
        page.screenshot(path=shots / "charts-on-open.png", full_page=True)


def test_a_local_directory_costs_nothing_per_request(store: str, page: Page, shots: Path) -> None:
    """On a local directory the broker reckons no dollars, and the page says why instead of
    pricing its file writes at S3's PUT price."""
    with Broker(store, max_attempts=1) as broker, connect(broker.url) as client:
        busy_queues(client)
        summary = httpx.get(broker.url + "/dashboard/summary").json()
        cost = summary["cost"]
        assert cost["store_kind"] == "directory" and cost["requests"]["put"] > 0
        assert (cost["dollars"], cost["per_month"], cost["put_price"]) == (0, 0, 0)
        metrics = httpx.get(broker.url + "/metrics").text
        assert "s3q_broker_store_dollars 0.0" in metrics
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.goto(broker.url + "/")
        text = page.locator("#cost")
        expect(text).to_contain_text("a local directory charges nothing per request")
        expect(text).to_contain_text(f"{cost['requests']['put']:,} PUT")
        assert not re.search(r"\$\s*\d", text.inner_text())  # no dollar figure at all
        text.screenshot(path=shots / "cost-local-directory.png")


@pytest.mark.parametrize("width", [1280, 1400])
def test_queue_table_fits_without_scrolling(
    store: str, page: Page, shots: Path, width: int
) -> None:
    """Every column of the queue table, its last header whole, fits the page from 1280 pixels
    wide up: no horizontal scrollbar."""
    with Broker(store, max_attempts=1) as broker, connect(broker.url) as client:
        busy_queues(client)
        page.set_viewport_size({"width": width, "height": 1000})
        page.goto(broker.url + "/")
        expect(page.locator("#queues tbody tr")).to_have_count(len(SCENE))
        expect(page.locator(cell(page, "orders", "dead"))).to_have_text("2")
        fit = page.evaluate(
            """() => {
                const card = document.getElementById("queues").parentElement;
                const last = [...document.querySelectorAll("#queues thead th")].at(-1);
                const inner = card.getBoundingClientRect().right
                    - parseFloat(getComputedStyle(card).paddingRight) - card.clientLeft;
                return {
                    scroll: card.scrollWidth, client: card.clientWidth,
                    page: document.documentElement.scrollWidth, viewport: innerWidth,
                    right: last.getBoundingClientRect().right, inner,
                    clipped: [...document.querySelectorAll("#queues th")]
                        .filter((th) => th.scrollWidth > th.clientWidth).length,
                };
            }"""
        )
        assert fit["scroll"] <= fit["client"], fit
        assert fit["page"] <= fit["viewport"], fit
        assert fit["right"] <= fit["inner"] + 0.5, fit
        assert fit["clipped"] == 0, fit
        expect(page.locator("#queues thead th").last).to_have_text("Noisy tenants")
        page.screenshot(path=shots / f"table-{width}.png", full_page=True)


def test_a_queue_has_a_url(store: str, page: Page, shots: Path) -> None:
    """``/#name`` opens queue ``name`` (selected, its throughput and dead letters shown), even
    one of the store the broker has not opened yet; selecting a queue puts it in the URL, and
    Back goes to the queue before."""
    with s3q.open(f"{store}/archive") as archive:  # in the store, not open on the broker
        archive.enqueue(b"kept")
    with Broker(store, max_attempts=1) as broker, connect(broker.url) as client:
        busy_queues(client)
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.goto(broker.url + "/#orders")  # not the first queue, which is shown by default
        expect(page.locator('#queues tr.selected[data-queue="orders"]')).to_have_count(1)
        expect(page.locator("#tp-queue")).to_have_text("orders")
        expect(page.locator("#dlq-queue")).to_have_text("orders")
        expect(page.locator("#dead tbody tr td.payload").first).to_contain_text("orders")
        page.screenshot(path=shots / "url-orders.png", full_page=True)

        page.click('#queues tr[data-queue="emails"]')
        expect(page).to_have_url(broker.url + "/#emails")
        expect(page.locator("#dead tbody tr td.payload").first).to_contain_text("emails")
        page.go_back()
        expect(page).to_have_url(broker.url + "/#orders")
        expect(page.locator('#queues tr.selected[data-queue="orders"]')).to_have_count(1)
        expect(page.locator("#tp-queue")).to_have_text("orders")

        page.goto(broker.url + "/#archive")  # a link followed: the page opens the queue
        expect(page.locator('#queues tr.selected[data-queue="archive"]')).to_have_count(1)
        expect(page.locator(cell(page, "archive", "pending"))).to_have_text("1")
        assert "archive" in client.queues()

        page.goto(broker.url + "/#ghost")  # not in the store: said so, nothing made
        expect(page.locator("#open-error")).to_contain_text("no queue named 'ghost'")
        expect(page.locator("#queues tr.selected")).to_have_count(1)
        assert "ghost" not in client.queues()


def test_serve_prints_dashboard_url(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3q.cli", "serve", "--port", "0"],
        cwd=tmp_path,
        env={**child_env(), "S3Q_STORE": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.strip() == f"s3q broker serving {tmp_path / 's3q-data'}"
        line = proc.stdout.readline().strip()
        assert line.startswith("dashboard: http://127.0.0.1:") and line.endswith("/")
        answer = httpx.get(line.removeprefix("dashboard: "))
        assert answer.status_code == 200 and "s3q broker" in answer.text
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert proc.wait(15) in (0, -signal.SIGTERM)


def test_serve_without_broker_extra_is_one_line(tmp_path: Path) -> None:
    code = "import sys; sys.modules['uvicorn'] = None; from s3q.cli import main; main(['serve'])"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=child_env(), capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.startswith("Error: InvalidConfig: the broker needs its extra")
    assert "pip install 's3q[broker]'" in done.stderr and "Traceback" not in done.stderr


def test_page_shows_noisy_tenants(store: str, page: Page) -> None:
    """The noisy tenants of a queue, with its quiet tenants' messages in the cell's title."""
    with Broker(store) as broker, connect(broker.url) as client:
        q = client.queue("shared")
        q.enqueue_batch([{"payload": b"x", "tenant": "big"}] * 50)
        page.goto(broker.url + "/")
        expect(page.locator(cell(page, "shared", "noisy_tenants"))).to_have_text("0")
        q.dequeue(max_messages=40)
        q.enqueue(b"y", tenant="small")
        noisy = page.locator(cell(page, "shared", "noisy_tenants"))
        expect(noisy).to_have_text("1")
        expect(noisy).to_have_attribute("title", re.compile(r"quiet tenants: 1 visible, 0 in"))

"""``s3q serve`` and ``s3q worker``: the commands that run until they are stopped (each shuts
down on SIGTERM in its own way: the broker drains, the worker finishes its handlers)."""

from __future__ import annotations

import sys

import click

from ..broker.limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_IDLE_CLOSE,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
)
from ..config import MAX_WINDOW
from ..prices import S3, named_prices
from . import inputs
from .commands import main
from .errors import friendly_errors
from .stores import (
    resolve,
    shown,
    store_option,
    store_root,
)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False),
    help="Bearer tokens, one per line (also $S3Q_TOKENS, comma-separated).",
)
@click.option(
    "--advertise",
    metavar="URL",
    help="URL the other brokers of a cluster reach this one at [default: http://HOST:PORT].",
)
@click.option(
    "--peer",
    "peers",
    metavar="URL",
    multiple=True,
    help="A broker of the cluster (repeat it): calls are forwarded only to those listed "
    "[default: none with tokens, else those on this machine].",
)
@click.option(
    "--sqs-credentials",
    type=click.Path(exists=True, dir_okay=False),
    help="SQS access keys, ACCESS_KEY_ID:SECRET per line (also $S3Q_SQS_CREDENTIALS, "
    "comma-separated): SQS requests must be SigV4-signed with one.",
)
@click.option(
    "--principals",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Principals and their grants (TOML): who may send, receive, read or administer which "
    "queues; read again on SIGHUP and when it changes.",
)
@click.option(
    "--audit-log",
    metavar="FILE",
    help="Append the audit trail (a JSON line per refused call and admin action) to FILE; - "
    "for standard output [default: standard output, with credentials].",
)
@click.option(
    "--audit-all", is_flag=True, help="Put every call in the audit trail, not only those."
)
@click.option(
    "--max-body",
    type=click.IntRange(min=1024),
    default=DEFAULT_MAX_BODY,
    show_default=True,
    metavar="BYTES",
    help="Largest native API request body; larger ones are refused (413) unread.",
)
@click.option(
    "--max-batch",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BATCH,
    show_default=True,
    metavar="N",
    help="Most entries of a native API call's list (batch items, receipts, ids).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    metavar="N",
    help="Connections and requests in progress beyond which requests are answered 503.",
)
@click.option(
    "--head-timeout",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_HEAD_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="A request's head must arrive within this, or the connection is closed.",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_BODY_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="A request's body must arrive within this, or it is refused (408).",
)
@click.option(
    "--idle-close",
    type=click.FloatRange(min=0),
    default=DEFAULT_IDLE_CLOSE,
    show_default=True,
    metavar="SECONDS",
    help="Close a queue no call used for this long (its lease renewals stop); 0: never.",
)
@click.option(
    "--commit-window",
    type=click.FloatRange(min=0, max=MAX_WINDOW),
    metavar="SECONDS",
    help="How long an idle queue may gather calls into one store write: fewer requests for "
    "that much latency at most [default: 0.02 on object stores, 0 on a directory].",
)
@inputs.lease_ttl_option
@click.option(
    "--put-price",
    type=click.FloatRange(min=0),
    metavar="DOLLARS",
    help="What the store charges per 1,000 PUTs and LISTs, for the spend shown on the "
    f"dashboard and at /metrics [default: S3's list price, {S3.put}, on an object store; "
    "0 on a directory].",
)
@click.option(
    "--get-price",
    type=click.FloatRange(min=0),
    metavar="DOLLARS",
    help=f"What the store charges per 1,000 GETs [default: {S3.get} on an object store; "
    "0 on a directory].",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="What the broker logs: info, its life and a summary of the requests answered each "
    "minute; warning and above only what goes wrong.",
)
@click.option(
    "--access-log",
    is_flag=True,
    help="Also log a line per request (at info; about 135 µs of broker CPU each).",
)
@store_option
@friendly_errors
def serve(
    host: str,
    port: int,
    token_file: str | None,
    advertise: str | None,
    peers: tuple[str, ...],
    sqs_credentials: str | None,
    principals: str | None,
    audit_log: str | None,
    audit_all: bool,
    max_body: int,
    max_batch: int,
    max_connections: int,
    head_timeout: float,
    body_timeout: float,
    idle_close: float,
    commit_window: float | None,
    lease_ttl: float | None,
    put_price: float | None,
    get_price: float | None,
    log_level: str,
    access_log: bool,
    store: str | None,
) -> None:
    """Serve every queue of the store over HTTP (native API; /openapi.json), with a web
    dashboard at / (prints its URL once listening) and an SQS-compatible API on POST /.

    Run it on several hosts over one store for a cluster: each queue is led by one broker,
    the others forward to it (if it is a --peer) and take over when it dies.
    Needs the broker extra: pip install 's3q[broker]'.
    """
    from ..broker import serve as run

    where = store_root(store)
    _check_principals(principals)

    def ready(url: str) -> None:
        click.echo(f"s3q broker serving {shown(where)}\ndashboard: {url}")
        sys.stdout.flush()

    run(
        where,
        host=host,
        port=port,
        token_file=token_file,
        advertise=advertise,
        peers=list(peers) or None,
        sqs_credentials=sqs_credentials,
        principals=principals,
        audit_log=audit_log,
        audit_all=audit_all,
        on_ready=ready,
        max_body=max_body,
        max_batch=max_batch,
        max_connections=max_connections,
        head_timeout=head_timeout,
        body_timeout=body_timeout,
        idle_close=idle_close,
        options=inputs.writer_options(commit_window=commit_window, lease_ttl=lease_ttl),
        prices=named_prices(put_price, get_price),
        log_level=log_level,
        access_log=access_log,
    )


def _check_principals(path: str | None) -> None:
    """A principals file that cannot be used is a usage error (exit 2), its fault named."""
    if path is None:
        return
    from ..broker.principals import InvalidPrincipals, load

    try:
        load(path)
    except InvalidPrincipals as exc:
        raise click.BadParameter(str(exc), param_hint="'--principals'") from None


@main.command()
@click.argument("target", metavar="MODULE:FUNCTION")
@click.option("--queue", "name", help="Queue NAME (or URL) [default: the one @handler names].")
@click.option("--concurrency", type=click.IntRange(min=1), help="Handlers at once [default 8].")
@click.option("--prefetch", type=click.IntRange(min=1), help="Most messages buffered.")
@click.option(
    "--visibility-timeout", type=click.FloatRange(min=0, min_open=True), help="Lease, seconds."
)
@click.option("--grace", type=click.FloatRange(min=0), help="Seconds to finish on SIGTERM.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve /metrics here.")
@click.option(
    "--poll", is_flag=True, help="Through a broker: poll for messages, not a subscription."
)
@store_option
@friendly_errors
def worker(
    target: str,
    name: str | None,
    concurrency: int | None,
    prefetch: int | None,
    visibility_timeout: float | None,
    grace: float | None,
    metrics_port: int | None,
    poll: bool,
    store: str | None,
) -> None:
    """Run MODULE:FUNCTION as a worker until SIGTERM or Ctrl-C.

    The function gets each message; returning completes it, raising fails it (retried with
    backoff, then dead-lettered). Example: s3q worker app.tasks:send_email --queue emails
    """
    import logging

    from ..worker import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run_worker(
        target,
        queue_url=resolve(name, store) if name is not None else None,
        store=store,
        concurrency=concurrency,
        prefetch=prefetch,
        visibility_timeout=visibility_timeout,
        grace=grace,
        metrics_port=metrics_port,
        push=not poll,
    )

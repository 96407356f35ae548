"""Celery (kombu) on s3q's own transport: ``Celery(broker="s3q://host:8765/")``.

kombu finds a transport by the scheme of the broker URL in ``kombu.transport.TRANSPORT_ALIASES``
(it has no entry point for transports), so importing this package registers ``s3q`` there:

    import s3q.celery  # noqa: F401  (registers the s3q:// transport)
    app = Celery("proj", broker="s3q://127.0.0.1:8765/")

``s3q+file:///path``, ``s3q+s3://bucket/prefix`` (any store URL after ``s3q+``) open the
queues in this process instead of through a broker (one process: producers and the worker in
it). Without the import, ``broker_transport="s3q.celery.transport:Transport"`` names the class
for an ``s3q://`` URL. See docs/celery.md; the transport itself is :mod:`.transport`.
"""

from __future__ import annotations

__all__ = ["ALIAS", "TRANSPORT", "register"]

ALIAS = "s3q"
TRANSPORT = "s3q.celery.transport:Transport"


def register() -> None:
    """Make ``s3q://`` (and ``s3q+<url>``) broker URLs kombu's: an entry of its transport
    aliases. Done by importing this package; idempotent."""
    from kombu import transport

    transport.TRANSPORT_ALIASES[ALIAS] = TRANSPORT
    transport._transport_cache.pop(ALIAS, None)


register()

"""The OpenAPI 3.1 document of the native API, written from the route table."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import msgspec

from ..message import CompactionReport, Message, QueueStats
from ..wire.codec import API_PREFIX, JSON, MSGPACK
from ..wire.pages import Page
from .routes import ENDPOINTS, Endpoint

ERROR_STATUSES = {
    "400": "Bad input (InvalidArgument, InvalidPriority, InvalidConfig)",
    "401": "No bearer token (AuthError)",
    "403": "Wrong bearer token, or a call its principal's grants do not allow (AuthError)",
    "404": "No such message (MessageNotFound)",
    "409": "ReceiptExpired, or QueueLocked (another writer holds the queue)",
    "413": "MessageTooLarge",
    "429": "QueueFull",
    "503": "StoreError, WriterFenced or QueueClosed: retry later",
    "507": "StoreFull (the broker's disk is full): nothing was done; retry once space is freed",
}

DESCRIPTION = (
    "The s3q broker's native API. Request and answer bodies are msgpack maps "
    f"(`{MSGPACK}`), so payloads travel as raw bytes; JSON is accepted and given "
    "(`Accept: application/json`) for everything but payloads, which JSON carries in base64. "
    "Errors are `{error: ExceptionClassName, message: text}`."
)


def _version() -> str:
    """s3q's version as installed (read from its metadata, not by importing the package root)."""
    try:
        return metadata.version("s3q")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _schemas() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(
        [Message, Page, QueueStats, CompactionReport], ref_template="#/components/schemas/{name}"
    )
    components["Message"]["properties"]["payload"] = {
        "type": "string",
        "format": "binary",
        "description": "raw bytes (msgpack bin); base64 in JSON",
    }
    components["Error"] = {
        "type": "object",
        "properties": {
            "error": {"type": "string", "description": "the s3q exception class name"},
            "message": {"type": "string"},
            "holder": {"type": "string", "description": "QueueLocked only"},
            "expires_at": {"type": ["number", "null"], "description": "QueueLocked only"},
        },
        "required": ["error", "message"],
    }
    return dict(components)


def _content(schema: dict[str, Any]) -> dict[str, Any]:
    return {MSGPACK: {"schema": schema}, JSON: {"schema": schema}}


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": endpoint.operation,
        "summary": endpoint.summary,
        "parameters": [
            {
                "name": p.name,
                "in": p.where,
                "required": p.required,
                "schema": p.schema,
                **({"description": p.description} if p.description else {}),
            }
            for p in endpoint.params
            if p.where != "body"
        ],
        "responses": {
            "200": {"description": "OK", "content": _content(endpoint.response or {})},
            **{
                code: {
                    "description": text,
                    "content": _content({"$ref": "#/components/schemas/Error"}),
                }
                for code, text in ERROR_STATUSES.items()
            },
        },
    }
    fields = [p for p in endpoint.params if p.where == "body"]
    if fields:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                p.name: {**p.schema, **({"description": p.description} if p.description else {})}
                for p in fields
            },
            "additionalProperties": False,
        }
        required = [p.name for p in fields if p.required]
        if required:
            schema["required"] = required
        op["requestBody"] = {"required": bool(required), "content": _content(schema)}
    return op


def document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in ENDPOINTS:
        paths.setdefault(API_PREFIX + endpoint.path, {})[endpoint.method.lower()] = _operation(
            endpoint
        )
    return {
        "openapi": "3.1.0",
        "info": {"title": "s3q broker", "version": _version(), "description": DESCRIPTION},
        "paths": paths,
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }

"""The SQS-compatible endpoint of the broker: the AWS JSON 1.0 and the AWS query protocols of
SQS on ``POST /``, so boto3, the AWS CLI and other SQS clients, old and new, work unmodified
(see docs/sqs.md).

Modules: :mod:`.protocol` (JSON requests, answers, errors), :mod:`.query` (the same in the
query protocol's forms and XML), :mod:`.shapes` (request shapes), :mod:`.sigv4` (signatures),
:mod:`.digest` (MD5 digests), :mod:`.messages` (SQS messages in s3q messages: sent, stored,
received), :mod:`.handles` (receipt handles), :mod:`.queues` (queue attributes), :mod:`.catalog`
(which queues exist), :mod:`.moves` (dead letters moved: into dead-letter queues, and by
message-move tasks), :mod:`.actions` (the actions), :mod:`.endpoint` (the routes: auth,
dispatch, errors).
"""

from __future__ import annotations

from .endpoint import Endpoint, routes

__all__ = ["Endpoint", "routes"]

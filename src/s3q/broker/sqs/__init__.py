"""The SQS-compatible endpoint of the broker: the AWS JSON 1.0 protocol of SQS on ``POST /``,
so boto3, the AWS CLI and other SQS clients work unmodified (see docs/sqs.md).

Modules: :mod:`.protocol` (requests, answers, errors), :mod:`.shapes` (request shapes),
:mod:`.sigv4` (signatures), :mod:`.digest` (MD5 digests), :mod:`.messages` (SQS messages in
s3q messages), :mod:`.handles` (receipt handles), :mod:`.queues` (queue attributes),
:mod:`.catalog` (which queues exist), :mod:`.actions` (the actions), :mod:`.endpoint` (the
route: auth, dispatch, errors).
"""

from __future__ import annotations

from .endpoint import route

__all__ = ["route"]

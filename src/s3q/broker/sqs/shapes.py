"""The request shapes of the SQS actions served, as botocore sends them (field names as in
botocore's ``sqs/2012-11-05`` service model). Unknown fields are ignored, as SQS does."""

from __future__ import annotations

import msgspec


class Shape(msgspec.Struct, kw_only=True):
    """Base of every request shape."""


class AttributeValue(Shape, omit_defaults=True):
    """A typed message attribute (``BinaryValue`` arrives base64-encoded: bytes here)."""

    DataType: str = ""
    StringValue: str | None = None
    BinaryValue: bytes | None = None
    StringListValues: list[str] | None = None
    BinaryListValues: list[bytes] | None = None


Attributes = dict[str, AttributeValue]


class ByName(Shape):
    QueueName: str
    QueueOwnerAWSAccountId: str | None = None


class CreateQueue(Shape):
    QueueName: str
    Attributes: dict[str, str] = {}
    tags: dict[str, str] = {}


class ListQueues(Shape):
    QueueNamePrefix: str | None = None
    NextToken: str | None = None
    MaxResults: int | None = None


class ByUrl(Shape):
    QueueUrl: str


class ListSources(ByUrl):
    NextToken: str | None = None
    MaxResults: int | None = None


class GetQueueAttributes(ByUrl):
    AttributeNames: list[str] = []


class SetQueueAttributes(ByUrl):
    Attributes: dict[str, str]


class MessageFields(Shape):
    MessageBody: str
    DelaySeconds: int | None = None
    MessageAttributes: Attributes = {}
    MessageSystemAttributes: Attributes = {}
    MessageDeduplicationId: str | None = None
    MessageGroupId: str | None = None


class SendMessage(MessageFields, kw_only=True):
    QueueUrl: str


class SendEntry(MessageFields, kw_only=True):
    Id: str


class SendMessageBatch(ByUrl):
    Entries: list[SendEntry] = []


class ReceiveMessage(ByUrl):
    AttributeNames: list[str] = []
    MessageSystemAttributeNames: list[str] = []
    MessageAttributeNames: list[str] = []
    MaxNumberOfMessages: int | None = None
    VisibilityTimeout: int | None = None
    WaitTimeSeconds: int | None = None
    ReceiveRequestAttemptId: str | None = None


class DeleteMessage(ByUrl):
    ReceiptHandle: str


class DeleteEntry(Shape):
    Id: str
    ReceiptHandle: str


class DeleteMessageBatch(ByUrl):
    Entries: list[DeleteEntry] = []


class ChangeVisibility(ByUrl):
    ReceiptHandle: str
    VisibilityTimeout: int


class ChangeEntry(Shape):
    Id: str
    ReceiptHandle: str
    VisibilityTimeout: int = 0


class ChangeVisibilityBatch(ByUrl):
    Entries: list[ChangeEntry] = []


class TagQueue(ByUrl):
    Tags: dict[str, str]


class UntagQueue(ByUrl):
    TagKeys: list[str]


class AddPermission(ByUrl):
    Label: str
    AWSAccountIds: list[str] = []
    Actions: list[str] = []


class RemovePermission(ByUrl):
    Label: str


class StartMove(Shape):
    SourceArn: str
    DestinationArn: str | None = None
    MaxNumberOfMessagesPerSecond: int | None = None


class CancelMove(Shape):
    TaskHandle: str


class ListMoves(Shape):
    SourceArn: str
    MaxResults: int | None = None

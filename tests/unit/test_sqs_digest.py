"""MD5OfMessageAttributes as the SQS endpoint computes it, against moto's (the AWS SDKs')."""

from __future__ import annotations

from sqs_checks import ATTRIBUTES, reference_md5

from s3q.broker.sqs.digest import md5_of_attributes
from s3q.broker.sqs.shapes import AttributeValue


def test_md5_of_attributes_matches_the_reference() -> None:
    ours = {
        k: AttributeValue(
            DataType=v["DataType"],
            StringValue=v.get("StringValue"),  # type: ignore[arg-type]
            BinaryValue=v.get("BinaryValue"),  # type: ignore[arg-type]
        )
        for k, v in ATTRIBUTES.items()
    }
    assert md5_of_attributes(ours) == reference_md5(ATTRIBUTES)

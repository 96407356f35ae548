"""Admission of new messages (``s3q.writer.admission``): hand-built items, no store, no writer."""

from __future__ import annotations

import pytest

from s3q.errors import QueueFull
from s3q.log.staging import StagedObject
from s3q.validate import Item
from s3q.writer import admission


def item(
    payload: bytes = b"x",
    priority: int = 0,
    dedup_id: str | None = None,
    group: str | None = None,
    tenant: str | None = None,
    delay: float = 0.0,
    attributes: dict[str, str] | None = None,
) -> Item:
    return Item(payload, priority, delay, dedup_id, group, attributes, tenant)


def nothing_seen(dedup_id: str) -> str | None:
    return None


def staged(key: str, count: int, **columns: object) -> StagedObject:
    return StagedObject(
        key=key,
        size=count,
        offsets=list(range(count)),
        sizes=[1] * count,
        **columns,  # type: ignore[arg-type]
    )


def test_room_refuses_what_does_not_fit_and_says_why() -> None:
    admission.room("memory://q", 8, 2, 10)
    admission.room("memory://q", 10**9, 10**9, None)  # no limit
    with pytest.raises(QueueFull, match="holds 9 messages; max_queue_depth is 10, so 2 more"):
        admission.room("memory://q", 9, 2, 10)


def test_unseen_counts_all_but_known_duplicates() -> None:
    items = [item(dedup_id="a"), item(dedup_id="b"), item(), item(dedup_id="b")]
    assert admission.unseen(items, {"a": "id-a"}.get) == 3  # twins in items are not looked for


def test_a_duplicate_answers_with_the_first_id_known_or_in_the_same_call() -> None:
    items = [item(b"1", dedup_id="old"), item(b"2", dedup_id="new"), item(b"3", dedup_id="new")]
    admitted = admission.admit(items, {"old": "first-old"}.get)
    assert [it.payload for it in admitted.fresh] == [b"2"]
    assert admitted.answers == ["first-old", 0, 0]
    assert admitted.ids(["made-0"]) == ["first-old", "made-0", "made-0"]


def test_all_duplicates_make_nothing() -> None:
    admitted = admission.admit([item(dedup_id="a")], {"a": "id-a"}.get)
    assert admitted.fresh == [] and admitted.ids([]) == ["id-a"]


def test_new_messages_go_in_runs_of_one_priority_and_tenant_in_order_within_each() -> None:
    items = [
        item(b"a", priority=1, tenant="t"),
        item(b"b", priority=5),
        item(b"c", priority=1),
        item(b"d", priority=5),
        item(b"e", priority=1, tenant="t"),
    ]
    admitted = admission.admit(items, nothing_seen)
    assert [it.payload for it in admitted.fresh] == [b"b", b"d", b"c", b"a", b"e"]
    made = [f"id-{p.decode()}" for p in (it.payload for it in admitted.fresh)]
    assert admitted.ids(made) == ["id-a", "id-b", "id-c", "id-d", "id-e"]  # as given


def test_a_batch_with_a_group_keeps_its_order() -> None:
    items = [item(b"a", priority=1, group="g"), item(b"b", priority=5)]
    admitted = admission.admit(items, nothing_seen)
    assert [it.payload for it in admitted.fresh] == [b"a", b"b"]


def test_payload_objects_follow_their_messages_and_a_duplicates_is_not_needed() -> None:
    items = [
        item(b"small", priority=0),
        item(b"large", priority=9),
        item(b"twin", priority=9, dedup_id="d"),
        item(b"large-twin", dedup_id="d"),
    ]
    admitted = admission.admit(items, nothing_seen, {1: "blob/1", 3: "blob/3"})
    assert [it.payload for it in admitted.fresh] == [b"large", b"twin", b"small"]
    assert admitted.blobs == {0: "blob/1"}
    assert admitted.twins == ["blob/3"]
    assert admitted.carried() == [1, 2]


def test_the_append_describes_the_new_messages_as_columns() -> None:
    items = [item(b"ab", dedup_id="d", attributes={"k": "v"}), item(b"c", delay=2.5)]
    op = admission.admit(items, nothing_seen).append(first=7, now=100.0, offset=64)
    assert (op.first, op.enqueued_at, op.offset, op.sizes) == (7, 100.0, 64, [2, 1])
    assert op.delays == [0.0, 2.5]
    assert op.dedup_ids == ["d", None]
    assert op.attributes == [{"k": "v"}, None]
    assert op.priorities is None and op.groups is None and op.tenants is None
    assert op.blobs is None and op.key is None


def test_staged_objects_without_dedup_ids_are_taken_whole_in_place() -> None:
    objects = [staged("s/1", 3), staged("s/2", 2)]
    admitted = admission.admit_staged(objects, nothing_seen)
    assert admitted.fresh == 5 and admitted.answers is None
    ops = admitted.appends(start=10, now=1.0)
    assert [(op.key, op.first, op.sizes, op.offsets) for op in ops] == [
        ("s/1", 10, [1, 1, 1], [0, 1, 2]),
        ("s/2", 13, [1, 1], [0, 1]),
    ]
    assert admitted.places(10) == range(10, 15)
    made = [f"m{i}" for i in range(5)]
    assert admitted.ids(made) is made


def test_staged_duplicates_answer_with_the_first_id_across_objects() -> None:
    objects = [
        staged("s/1", 3, dedup_ids=["a", None, "old"]),
        staged("s/2", 2, dedup_ids=["a", "b"]),
    ]
    admitted = admission.admit_staged(objects, {"old": "id-old"}.get)
    assert admitted.rows == [[0, 1], [1]] and admitted.fresh == 3
    ops = admitted.appends(start=0, now=1.0)
    assert [(op.first, op.offsets, op.dedup_ids) for op in ops] == [
        (0, [0, 1], ["a", None]),
        (2, [1], ["b"]),
    ]
    assert admitted.ids(["m0", "m1", "m2"]) == ["m0", "m1", "id-old", "m0", "m2"]


def test_staged_rows_go_in_runs_and_answer_in_the_order_given() -> None:
    objects = [staged("s/1", 2), staged("s/2", 3, priorities=[0, 9, 0], tenants=["x", None, None])]
    admitted = admission.admit_staged(objects, nothing_seen)
    assert admitted.rows == [None, [1, 2, 0]]
    ops = admitted.appends(start=4, now=1.0)
    assert ops[1].first == 6 and ops[1].offsets == [1, 2, 0]
    assert ops[1].priorities == [9, 0, 0] and ops[1].tenants == [None, None, "x"]
    assert list(admitted.places(4)) == [4, 5, 8, 6, 7]


def test_runs_together_leaves_alone_what_is_already_one_run() -> None:
    assert admission.runs_together([3, 3, 3], None) is None
    assert admission.runs_together([1, 2], [None, "g"]) is None
    assert admission.runs_together([1, 2, 1], None) == ([1, 0, 2], [1, 0, 2])

"""Child process: run one scripted scenario, print its outcome as JSON, then wait to be killed.

The parent SIGKILLs this process after reading the outcome line, so nothing after the last
acknowledged operation (in particular no close(), no checkpoint at close) runs.

usage: child_ops.py URL OPTIONS_JSON SCENARIO
"""

import json
import sys
import time

import s3q


def ops(q) -> dict:
    ids = {name: q.enqueue(name.encode()) for name in ("a", "b", "c", "d")}
    ids["e"] = q.enqueue(b"e", dedup_id="k")
    got = {m.payload.decode(): m for m in q.dequeue(max_messages=4, visibility_timeout=1000)}
    assert sorted(got) == ["a", "b", "c", "d"], sorted(got)
    q.complete(got["a"])
    q.fail(got["b"], "err-b")  # max_attempts=1: dead
    q.extend(got["c"], 5000)
    q.fail(got["d"], "err-d")
    assert q.redrive(ids=[ids["d"]]) == 1
    return {"ids": ids, "receipt_c": got["c"].receipt}


def cleanup(q) -> dict:
    mid = q.enqueue(b"x")
    [m] = q.dequeue()
    q.complete(m)
    time.sleep(0.01)  # completed_retention=0: let it be strictly older than the retention
    return {"id": mid, "pruned": q.cleanup()}


def purge(q) -> dict:
    ids = q.enqueue_batch([b"1", b"2", b"3"])
    q.dequeue()
    return {"ids": ids, "purged": q.purge()}


def main() -> None:
    url, options, scenario = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    q = s3q.open(url, **options)
    result = {"ops": ops, "cleanup": cleanup, "purge": purge}[scenario](q)
    print(json.dumps(result), flush=True)
    while True:
        time.sleep(60)  # wait for SIGKILL


if __name__ == "__main__":
    main()

"""Child process: enqueue, complete and compact in a loop, printing what was acknowledged.

Each line is JSON {"enqueued": [ids], "completed": [ids]}, printed (and flushed) only after the
call returned, i.e. after it is durable; a {"completing": [ids]} line comes before each
completion is asked for. The writer checkpoints every few operations and
collects garbage with no grace, so a SIGKILL from the parent lands mid-checkpoint or mid-GC often.

usage: child_compact.py URL OPTIONS_JSON
"""

import json
import sys
import time

import s3q


def open_when_free(url: str, options: dict[str, object]) -> s3q.Queue:
    """Wait out the writer lease of a killed predecessor (object stores keep it until it lapses)."""
    while True:
        try:
            return s3q.open(url, **options)
        except s3q.QueueLocked as exc:
            wait = (exc.expires_at or time.time() + 0.1) - time.time()
            time.sleep(min(max(wait, 0.05), 2.0))


def main() -> None:
    url, options = sys.argv[1], json.loads(sys.argv[2])
    q = open_when_free(url, options)
    i = 0
    while True:
        ids = q.enqueue_batch([f"m-{i}-{k}".encode() for k in range(3)])
        print(json.dumps({"enqueued": ids, "completed": []}), flush=True)
        if i % 3 == 2:
            msgs = q.dequeue(max_messages=2)
            # said before the call: a kill between its commit and the next line leaves the
            # parent knowing these may be completed, not that they are still pending
            print(json.dumps({"completing": [m.id for m in msgs]}), flush=True)
            q.complete_batch(msgs)
            print(json.dumps({"enqueued": [], "completed": [m.id for m in msgs]}), flush=True)
        if i % 5 == 4:
            q.compact()
        i += 1


if __name__ == "__main__":
    main()

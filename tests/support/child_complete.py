"""Child process: dequeue and complete from several threads, printing each acknowledged id.

A line "<id>" is printed (and flushed) only after complete() returned. The parent SIGKILLs this
process at a random moment. When the queue runs dry the child prints "empty" and waits.

usage: child_complete.py URL OPTIONS_JSON [THREADS]
"""

import json
import sys
import threading

import s3q


def main() -> None:
    url, options = sys.argv[1], json.loads(sys.argv[2])
    n_threads = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    q = s3q.open(url, **options)
    out = threading.Lock()
    print("ready", flush=True)

    def run(t: int) -> None:
        while True:
            msgs = q.dequeue(max_messages=1 + t % 3)
            if not msgs:
                with out:
                    sys.stdout.write("empty\n")
                    sys.stdout.flush()
                return
            if len(msgs) > 1 and t % 2:
                q.complete_batch(msgs)
            else:
                for m in msgs:
                    q.complete(m)
            with out:
                sys.stdout.write("".join(f"{m.id}\n" for m in msgs))
                sys.stdout.flush()

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sys.stdin.read()


if __name__ == "__main__":
    main()

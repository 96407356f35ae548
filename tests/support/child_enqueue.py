"""Child process: enqueue forever from several threads, printing each acknowledged id.

A line "<id> <payload>" is printed (and flushed) only after enqueue() returned, i.e. after the
operation is durable. The parent SIGKILLs this process at a random moment.

usage: child_enqueue.py URL OPTIONS_JSON [THREADS]
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
        i = 0
        while True:
            payload = f"t{t}-{i}".encode()
            if i % 7 == 3:
                ids = q.enqueue_batch([payload + b"-a", payload + b"-b"])
                lines = f"{ids[0]} {payload.decode()}-a\n{ids[1]} {payload.decode()}-b\n"
            else:
                mid = q.enqueue(payload, priority=i % 4)
                lines = f"{mid} {payload.decode()}\n"
            with out:
                sys.stdout.write(lines)
                sys.stdout.flush()
            i += 1

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()

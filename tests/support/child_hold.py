"""Child process: open a queue, say "ready", hold it until stdin closes, then close it.

usage: child_hold.py URL OPTIONS_JSON
"""

import json
import sys

import s3q


def main() -> None:
    url, options = sys.argv[1], json.loads(sys.argv[2])
    q = s3q.open(url, **options)
    mid = q.enqueue(b"from-child")
    print(f"ready {mid}", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    q.close()
    print("closed", flush=True)


if __name__ == "__main__":
    main()

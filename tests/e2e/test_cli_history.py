"""``s3q history``, run for real as a subprocess against a queue in a temporary directory."""

from __future__ import annotations

from pathlib import Path

from cli_runner import cli, data, failed, ok

import s3q


def _load(tmp_path: Path) -> tuple[str, str]:
    """A queue with a message that failed once and was then completed, and one that died: ids."""
    with s3q.open(
        f"file://{tmp_path}/store/q", max_attempts=1, retry_delay=0.0, history_retention=3600.0
    ) as q:
        done, dead = q.enqueue_batch([b"first", b"second"])
        for m in q.dequeue(max_messages=2):
            q.fail(m, "boom" if m.id == dead else "flaky")
    with s3q.open(f"file://{tmp_path}/store/q", max_attempts=2) as q:
        q.redrive([done])
        q.complete_batch(q.dequeue(max_messages=1))
    return done, dead


def test_history_by_id_prints_a_message_s_life(tmp_path: Path) -> None:
    done, dead = _load(tmp_path)
    life = data(cli(tmp_path, "history", "q", "--id", done, "--json"))
    assert life["id"] == done
    assert [e["kind"] for e in life["events"]] == [
        "enqueued", "leased", "dead", "redriven", "leased", "completed",
    ]  # fmt: skip
    assert life["events"][2]["error"] == "flaky" and life["events"][0]["size"] == 5
    table = ok(cli(tmp_path, "history", "q", "--id", dead))
    assert "boom" in table and "dead" in table and dead in table


def test_history_since_sums_up_a_period(tmp_path: Path) -> None:
    _load(tmp_path)
    summary = data(cli(tmp_path, "history", "q", "--since", "1h", "--json"))
    assert summary["events"] == {
        "enqueued": 2, "leased": 3, "dead": 2, "redriven": 1, "completed": 1,
    }  # fmt: skip
    assert summary["dwell"]["p50"] is not None and summary["processing"]["p99"] is not None
    assert sorted(summary["errors"]) == [["boom", 1], ["flaky", 1]]
    shown = ok(cli(tmp_path, "history", "q", "--since", "90m"))
    assert "dwell" in shown and "boom" in shown


def test_history_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    done, _ = _load(tmp_path)
    failed(cli(tmp_path, "history", "q"), 2, "--id", "--since")
    failed(cli(tmp_path, "history", "q", "--id", done, "--since", "1h"), 2, "one of")
    failed(cli(tmp_path, "history", "q", "--id", "nope"), 2, "not a message id")
    failed(cli(tmp_path, "history", "q", "--since", "soon"), 2, "not a duration")
    failed(cli(tmp_path, "history", "nosuch", "--since", "1h"), 1, "no queue at")
    for other in (f"{done[:8]}{999:012x}{0:08x}", "f" * 8 + done[8:]):  # no such seq, queue
        failed(cli(tmp_path, "history", "q", "--id", other), 1, "no history of message")


def test_replay_run_again_says_its_copies_were_there_already(tmp_path: Path) -> None:
    """A replay run twice: the second enqueues nothing (the copies' dedup ids were seen), and
    says so, rather than claiming to have replayed them again."""
    _load(tmp_path)
    first = data(cli(tmp_path, "replay", "q", "--into", "t", "--since", "1h", "--json"))
    assert (first["replayed"], first["deduplicated"], first["collected"]) == (2, 0, 0)
    again = data(cli(tmp_path, "replay", "q", "--into", "t", "--since", "1h", "--json"))
    assert (again["replayed"], again["deduplicated"], again["collected"]) == (0, 2, 0)
    text = ok(cli(tmp_path, "replay", "q", "--into", "t", "--since", "1h"))
    assert text.startswith("replayed 0 message(s)") and "2 were there already" in text, text
    assert data(cli(tmp_path, "stats", "t", "--json"))["total_enqueued"] == 2

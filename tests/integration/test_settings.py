"""Queue settings given to open are saved with the queue and in force for later opens."""

from __future__ import annotations

from conftest import FakeClock, StoreEnv

import s3q


def test_settings_given_once_stay_in_force(durable_env: StoreEnv) -> None:
    q = durable_env.open(max_attempts=1, visibility_timeout=7.0)
    q.close()
    q = durable_env.open()  # a CLI or a worker that knows nothing of the app's settings
    try:
        assert (q.config.max_attempts, q.config.visibility_timeout) == (1, 7.0)
        assert q.config.retry_delay == s3q.QueueConfig().retry_delay  # never given: default
    finally:
        q.close()


def test_a_new_value_replaces_the_saved_one_and_survives_a_checkpoint(
    durable_env: StoreEnv,
) -> None:
    durable_env.open(max_attempts=5).close()
    q = durable_env.open(max_attempts=2)
    q.enqueue(b"x")
    q.compact()  # the settings now live in a checkpoint, not only in the log
    q.close()
    q = durable_env.open()
    try:
        assert q.config.max_attempts == 2
    finally:
        q.close()


def test_saved_max_attempts_governs_a_writer_that_did_not_give_it(env: StoreEnv) -> None:
    clock = FakeClock()
    q = env.open(clock=clock, max_attempts=1)
    mid = q.enqueue(b"once")
    q.close()
    q = env.open(clock=clock)
    try:
        [m] = q.dequeue()
        q.fail(m, "boom")
        assert q.status(mid) is s3q.MessageStatus.DEAD  # the saved max_attempts=1, not 3
    finally:
        q.close()

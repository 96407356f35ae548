"""Queue history: readers of the log that need no writer (events, time windows, replay,
lives)."""

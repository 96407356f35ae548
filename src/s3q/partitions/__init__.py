"""A queue spread over partitions: N logs, each with a writer of its own, served as one
queue."""

"""The one fenced writer of a queue: group commit, recovery, leasing, upkeep (checkpoints,
garbage collection) and the reads that need the writer's index."""

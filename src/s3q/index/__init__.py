"""The queue's index: the log folded one operation at a time. No I/O and no clock: every
time is an argument."""

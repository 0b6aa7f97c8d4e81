"""Checks that a change keeps what it must: a replay's exact results, warm solves equal to cold ones, the code's shape."""

"""LP helpers over HiGHS, built from index arrays (no per-job constraint objects)."""

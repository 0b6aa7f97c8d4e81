"""What the server learns from jobs' progress: steps/s per kind and slot type, durations, elastic
jobs' models and batches.

May import: jobs, store."""

"""Job notifications: the POST of a job's summary to its notify URL when it ends.

May import: jobs, store."""

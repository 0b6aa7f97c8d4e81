"""What operators read: the job list a page at a time, the dashboard's history, /metrics.

May import: base, store, estimates, round, scheduler."""

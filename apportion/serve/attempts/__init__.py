"""Attempts of jobs: the scheduler's shared state (context.py), starting, stopping and escalating
attempts, leases, hung attempts and time limits, recovery after a restart, checkpoints read as
the job's account, the service a live attempt has received.

May import: base, jobs, store, accounts, estimates, resources."""

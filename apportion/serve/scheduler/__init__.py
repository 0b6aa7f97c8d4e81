"""The scheduler the server runs: one tick (rounds, attempts, recovery) and the requests the API
hands it (submit, cancel, lease, progress).

May import: base, jobs, store, accounts, estimates, resources, attempts, round."""

"""The round adapter: the shared round planner (mechanism/) over the state file on the wall clock,
and the admission before it.

May import: base, jobs, store, estimates, resources, attempts."""

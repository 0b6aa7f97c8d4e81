"""The state file: one StateStore made of a module per table family (each owning its tables' schema
and SQL), read through connections of their own; the round's rows kept between rounds; a state
file read as untrusted input; jobs' accounting.

May import: base, jobs."""

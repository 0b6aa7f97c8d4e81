"""The state file: SQLite tables, their schema and SQL, read through connections of their own;
the round's rows kept between rounds; a state file read as untrusted input; jobs' accounting.

May import: base, jobs."""

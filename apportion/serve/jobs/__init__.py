"""What a job is: a job file read and checked (its elastic, privacy and notify parts, job arrays),
the typed job record every reader gets, and whether a policy could ever run a job here.

May import: base."""

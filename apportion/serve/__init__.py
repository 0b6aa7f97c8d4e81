"""The real scheduler: job files, SQLite state, the wall-clock round loop and the HTTP API."""

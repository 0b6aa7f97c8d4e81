"""The server assembled: settings (flags and a config file), start-up, the executor chosen (local,
Ray, a plugin) and the threads that run it.

May import: base, jobs, store, notify, accounts, resources, scheduler, views, http."""

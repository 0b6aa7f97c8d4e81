"""The HTTP edge: the FastAPI app and its routes, request bodies and limits, the API document,
the dashboard page.

May import: base, jobs, store, accounts, scheduler, views."""

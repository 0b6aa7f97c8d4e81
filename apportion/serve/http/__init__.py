"""The HTTP edge: the FastAPI app, its table of routes and who may call each, the handlers, request
bodies and limits, the API document, the dashboard page.

May import: base, jobs, store, accounts, resources, scheduler, views."""

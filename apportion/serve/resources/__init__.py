"""Optional resources beside GPUs: privacy budget (privacy/), CPU cores (cores/), rented
instances (rental/), each a ``base.Resource`` listed in ``registry.py``; ``host.py`` is what a
resource may use of the server.

May import: base, jobs, store, estimates."""

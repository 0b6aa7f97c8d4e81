"""Optional resources beside GPUs, one package each: a ``base.Resource`` the round and the server
call, listed once in ``registry.py``; ``host.py`` is what a resource may use of the server.

May import: base, jobs, store, estimates."""

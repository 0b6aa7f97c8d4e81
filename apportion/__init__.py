"""apportion: share a cluster of accelerators among deep-learning training jobs.

``from apportion import Client`` is the Python client of ``apportion serve`` (docs/serve.md,
"Python client"); it is imported when first asked for, so that ``import apportion`` stays light.
"""

__version__ = "0.1.0"

_CLIENT = ("Client", "ClientError", "WaitTimedOut")  # from apportion.serve.client


def __getattr__(name: str):
    if name in _CLIENT:
        from apportion.serve import client

        return getattr(client, name)
    raise AttributeError(f"module 'apportion' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_CLIENT])

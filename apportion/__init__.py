"""apportion: share a cluster of accelerators among deep-learning training jobs.

``from apportion import Client`` is the Python client of ``apportion serve`` (docs/serve.md,
"Python client"); ``apportion.simulate``, ``compare`` and ``sweep`` are the commands of the same
names, from Python (docs/python.md). Each is imported when first asked for, so that
``import apportion`` stays light.
"""

import sys
import types

from apportion.core.version import VERSION as __version__

_CLIENT = ("Client", "ClientError", "WaitTimedOut")  # from apportion.serve.client
_API = ("simulate", "compare", "sweep")  # from apportion.api
_ARGUMENTS = ("ArgumentError",)  # from apportion.arguments


def __getattr__(name: str):
    if name in _CLIENT:
        from apportion.serve import client

        return getattr(client, name)
    if name in _API:
        from apportion import api

        return getattr(api, name)
    if name in _ARGUMENTS:
        from apportion import arguments

        return getattr(arguments, name)
    raise AttributeError(f"module 'apportion' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_CLIENT, *_API, *_ARGUMENTS])


class _Package(types.ModuleType):
    """The package, whose ``compare`` and ``sweep`` stay the API's functions once the modules of the
    same names (``apportion.compare``, ``apportion.sweep``: what they run) are imported: Python's
    import would otherwise set the names to the modules. The modules are in ``sys.modules``."""

    def __setattr__(self, name: str, value) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

"""The fixture each plugin test module uses: it starts with the built-in policies only, and the plugins a
test registered go with it. (Not a conftest.py: tests elsewhere import the top conftest by name.)"""

from __future__ import annotations

import sys

import pytest

from apportion.policies import registry


@pytest.fixture(autouse=True)
def built_ins_only():
    yield
    for name, entry in list(registry.ENTRIES.items()):
        if entry.source != "built-in":
            registry.unregister(name)
    sys.modules.pop("apportion_demo_plugins", None)

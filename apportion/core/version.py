"""The version of apportion (pyproject.toml says the same; a test holds them equal)."""

VERSION = "0.1.0"

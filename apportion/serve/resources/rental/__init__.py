"""Rented instances: the provisioner, the demand a round gives it, and a fake for tests."""

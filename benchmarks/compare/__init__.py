"""Comparisons: apportion beside another system (Gavel, Helios, PrivateKube, Synergy, Pollux) or its baselines."""

"""Accuracy: apportion's models (step times, pairs, durations, the simulator) against measurements."""

"""What a replay runs with no options: the seeded synthetic workload's size and arrival rate,
and the small heterogeneous cluster. A module of constants, so that reading them costs nothing."""

DEFAULT_CLUSTER = "v100:8,p100:8,k80:8"
DEFAULT_SYNTHETIC_JOBS = 400
DEFAULT_RATE_PER_HOUR = 8.0

"""The built-in catalogue of GPU instances: each cloud's instance names, their GPUs, list prices.

Prices are approximate on-demand list prices in dollars per instance-hour in each cloud's
cheapest US region (AWS us-east-1, Azure East US, GCP us-central1; GCP's as the VM plus its
attached GPUs), as the clouds' price pages gave them in 2023. Other regions cost
``REGIONS``'s factor times these (the synthetic market's regions; ``AWS_REGION_FACTORS`` for
the regions of AWS's price files). Egress: each cloud's first internet tier and its price between
its own regions, per GB, from the same pages. They are for replays that need a plausible market,
not quotes.
"""

from __future__ import annotations

from typing import NamedTuple


class Instance(NamedTuple):
    cloud: str
    name: str
    gpu_type: str
    gpus: int
    on_demand_per_hour: float


INSTANCES = (
    Instance("aws", "p2.xlarge", "k80", 1, 0.90),
    Instance("aws", "p2.8xlarge", "k80", 8, 7.20),
    Instance("aws", "p2.16xlarge", "k80", 16, 14.40),
    Instance("aws", "p3.2xlarge", "v100", 1, 3.06),
    Instance("aws", "p3.8xlarge", "v100", 4, 12.24),
    Instance("aws", "p3.16xlarge", "v100", 8, 24.48),
    Instance("aws", "p3dn.24xlarge", "v100", 8, 31.212),
    Instance("aws", "g4dn.xlarge", "t4", 1, 0.526),
    Instance("aws", "g4dn.2xlarge", "t4", 1, 0.752),
    Instance("aws", "g4dn.12xlarge", "t4", 4, 3.912),
    Instance("aws", "g4dn.metal", "t4", 8, 7.824),
    Instance("aws", "p4d.24xlarge", "a100", 8, 32.7726),
    Instance("aws", "p5.48xlarge", "h100", 8, 98.32),
    Instance("azure", "Standard_NC6", "k80", 1, 0.90),
    Instance("azure", "Standard_NC24", "k80", 4, 3.60),
    Instance("azure", "Standard_NC6s_v3", "v100", 1, 3.06),
    Instance("azure", "Standard_NC24s_v3", "v100", 4, 12.24),
    Instance("azure", "Standard_NC4as_T4_v3", "t4", 1, 0.526),
    Instance("azure", "Standard_ND96asr_v4", "a100", 8, 27.197),
    Instance("gcp", "n1-standard-4-1xk80", "k80", 1, 0.64),
    Instance("gcp", "n1-standard-8-1xv100", "v100", 1, 2.86),
    Instance("gcp", "n1-standard-32-4xv100", "v100", 4, 11.44),
    Instance("gcp", "n1-standard-4-1xt4", "t4", 1, 0.54),
    Instance("gcp", "a2-highgpu-1g", "a100", 1, 3.67),
    Instance("gcp", "a2-highgpu-8g", "a100", 8, 29.39),
)

# cloud -> region -> price factor over the cloud's cheapest US region
REGIONS = {
    "aws": {"us-east-1": 1.0, "us-west-2": 1.0, "eu-west-1": 1.08},
    "azure": {"eastus": 1.0, "westeurope": 1.1},
    "gcp": {"us-central1": 1.0, "europe-west4": 1.05},
}

# AWS regions a spot price history may come from -> the on-demand price factor over us-east-1, approximate:
# p3.2xlarge's Linux on-demand price there over us-east-1's where it is sold, else g4dn.xlarge's (2023 pages).
# A region missing here is refused by the reader (its on-demand price unknown), not priced as us-east-1.
AWS_REGION_FACTORS = {
    "us-east-1": 1.0, "us-east-2": 1.0, "us-west-1": 1.2, "us-west-2": 1.0, "ca-central-1": 1.1,
    "sa-east-1": 1.7, "eu-west-1": 1.08, "eu-west-2": 1.17, "eu-west-3": 1.17, "eu-central-1": 1.25,
    "eu-north-1": 1.06, "eu-south-1": 1.19, "ap-northeast-1": 1.37, "ap-northeast-2": 1.38,
    "ap-northeast-3": 1.37, "ap-southeast-1": 1.38, "ap-southeast-2": 1.38, "ap-south-1": 1.1,
    "ap-east-1": 1.5, "me-south-1": 1.24, "af-south-1": 1.35,
}
# (instance, region) -> on-demand $/h where the region's factor is far off: P2 costs 1.47x in Frankfurt,
# P3 1.25x (AWS caps a spot price at the on-demand one, and eu-central-1's P2 spot prices reach these).
AWS_ON_DEMAND = {
    ("p2.xlarge", "eu-central-1"): 1.326, ("p2.8xlarge", "eu-central-1"): 10.608,
    ("p2.16xlarge", "eu-central-1"): 21.216,
}

EGRESS_USD_PER_GB = {"aws": 0.09, "azure": 0.087, "gcp": 0.12}  # to the internet (another cloud)
INTER_REGION_USD_PER_GB = {"aws": 0.02, "azure": 0.02, "gcp": 0.02}  # between the cloud's own regions
DEFAULT_EGRESS_USD_PER_GB = 0.09  # a cloud the catalogue does not name

_BY_NAME = {(i.cloud, i.name): i for i in INSTANCES}


def instance(cloud: str, name: str) -> Instance | None:
    """The catalogue's entry for ``name`` on ``cloud``; None if it has none."""
    return _BY_NAME.get((cloud, name))


def instance_names(cloud: str) -> list[str]:
    return [i.name for i in INSTANCES if i.cloud == cloud]

"""The shared options turned into the library's inputs, with a one-line error (exit 2) for bad ones."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from apportion.cli.output import fail

if TYPE_CHECKING:
    from apportion.core.queues import QueueConfig
    from apportion.experiment import Inputs, WorkloadSettings
    from apportion.sim import SimConfig


def workload_settings(workload, cluster, jobs, rate, seed, start_s, end_s, throughputs, reference,
                      shape: str = "philly", trace_format: str | None = None) -> WorkloadSettings:
    from apportion.experiment import WorkloadSettings
    from apportion.workloads.synthetic import SHAPES

    if jobs is not None and jobs <= 0:
        raise fail(f"--jobs must be positive, got {jobs}")
    if rate <= 0:
        raise fail(f"--rate must be positive, got {rate}")
    if shape not in SHAPES:
        raise fail(f"--shape must be one of {', '.join(SHAPES)}, got '{shape}'")
    if workload and shape != "philly":
        raise fail("--shape applies to the synthetic workload only, not to --workload")
    if trace_format is not None and not workload:
        raise fail("--trace-format applies with --workload FILE only")
    return WorkloadSettings(
        path=workload, jobs=jobs, rate_per_hour=rate, seed=seed, start_s=start_s, end_s=end_s,
        reference_gpu_type=reference, cluster=cluster, throughputs_path=throughputs, shape=shape,
        trace_format=trace_format,
    )


def check_cpu_split(cpu_split: str) -> None:
    """Refuse a ``--cpu-split`` the simulator does not know."""
    from apportion.sim.cpu_cores import CPU_SPLITS

    if cpu_split not in CPU_SPLITS:
        raise fail(f"--cpu-split must be one of {', '.join(CPU_SPLITS)}, got '{cpu_split}'")


def with_privacy(settings: WorkloadSettings, blocks: str | None, policy: str, n: int | None, t_s: float | None,
                 timeout_s: float | None) -> WorkloadSettings:
    """``settings`` with the privacy-budget options, checked (``--blocks`` and the flags that go with it)."""
    from dataclasses import replace

    from apportion.mechanism.privacy_policies import PRIVACY_POLICIES, PrivacyPolicy

    if blocks is None:
        given = [flag for flag, value in (("--privacy-n", n), ("--privacy-t", t_s), ("--privacy-timeout-s", timeout_s))
                 if value is not None]
        if given:
            raise fail(f"{given[0]} applies with --blocks only")
        return settings
    if timeout_s is not None and not timeout_s > 0:
        raise fail(f"--privacy-timeout-s must be positive, got {timeout_s}")
    if policy not in PRIVACY_POLICIES:
        raise fail(f"--privacy-policy must be one of {', '.join(PRIVACY_POLICIES)}, got '{policy}'")
    if policy == "dpf-n" and n is None:
        raise fail("--privacy-policy dpf-n needs --privacy-n")
    if policy == "dpf-t" and t_s is None:
        raise fail("--privacy-policy dpf-t needs --privacy-t")
    if policy in ("rr", "pack") and (n is None) == (t_s is None):
        raise fail(f"--privacy-policy {policy} needs one of --privacy-n (unlock by claims) or --privacy-t (by time)")
    try:
        PrivacyPolicy(policy, n, t_s)
    except ValueError as exc:
        raise fail(str(exc)) from None
    return replace(settings, blocks_path=blocks, privacy_policy=policy, privacy_n=n, privacy_t_s=t_s,
                   privacy_timeout_s=timeout_s)


def sim_config(round_s: float, restart_cost_s: float, learn_models: bool = False) -> SimConfig:
    from apportion.sim import SimConfig

    if round_s <= 0:
        raise fail(f"--round-s must be positive, got {round_s}")
    if restart_cost_s < 0:
        raise fail(f"--restart-cost-s must be >= 0, got {restart_cost_s}")
    return SimConfig(round_s=round_s, restart_cost_s=restart_cost_s, learn_models=learn_models)


def rented_setup(market: list[str], provisioning: list[str], checkpoint_gb: float, inputs: Inputs, seed: int,
                 start: str | None = None, interruption_rates: str | None = None):
    """The market and the rental's settings for ``--market`` (given once or more), the provisioning policies
    checked first; what the user should know about how the market was read is said on stderr."""
    from apportion.cli.output import errors, escape
    from apportion.core.errors import InputError
    from apportion.experiment import load_market
    from apportion.policies.provisioning import PROVISIONING
    from apportion.sim.rented import RentalConfig

    unknown = [p for p in provisioning if p not in PROVISIONING]
    if unknown:
        raise fail(f"--provisioning: unknown policy '{unknown[0]}' (known: {', '.join(PROVISIONING)})")
    if not checkpoint_gb >= 0:
        raise fail(f"--checkpoint-gb must be >= 0, got {checkpoint_gb}")
    try:
        loaded = load_market(market, inputs.throughputs, seed, start=start, interruption_rates=interruption_rates)
    except (InputError, OSError) as exc:
        raise fail(str(exc)) from None
    for note in loaded.notes:
        errors.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    return loaded, RentalConfig(checkpoint_gb=checkpoint_gb)


def rented_options(market: list[str] | None, start: str | None, interruption_rates: str | None) -> None:
    """Refuse --market-start and --interruption-rates without --market."""
    for flag, value in (("--market-start", start), ("--interruption-rates", interruption_rates)):
        if value is not None and not market:
            raise fail(f"{flag} applies with --market FILE only")


def preemptions_line(result) -> str | None:
    """Where a rented run's spot preemptions came from, said under its results."""
    if result.rented is None:
        return None
    return f"spot preemptions: {result.rented.market.preemptions_from}"


def load_queues(path: Optional[str]) -> Optional[QueueConfig]:
    """The --queues file, or None without one."""
    if path is None:
        return None
    from apportion.core.errors import InputError
    from apportion.workloads.queues import load_queues as read

    try:
        return read(path)
    except InputError as exc:
        raise fail(str(exc)) from None


def prepare_replay(
    specs: list[str], options: dict, settings: WorkloadSettings, round_s: float, restart_cost_s: float,
    learn_models: bool = False,
) -> tuple[Inputs, SimConfig, dict]:
    """Check the policies and their options (``queues`` already read), then load the inputs:
    (inputs, config, policy options)."""
    from apportion.core.errors import InputError
    from apportion.experiment import check_policy_specs, load_inputs

    queue_config = options.get("queues")
    try:
        check_policy_specs(specs, **options)
    except ValueError as exc:
        raise fail(str(exc)) from None
    config = sim_config(round_s, restart_cost_s, learn_models)
    try:
        inputs = load_inputs(settings)
        if queue_config is not None:
            queue_config.check_cluster(inputs.cluster.gpu_types, inputs.cluster.capacity)
    except (InputError, OSError, ValueError) as exc:
        raise fail(str(exc)) from None
    return inputs, config, options

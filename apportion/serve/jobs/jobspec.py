"""A job file: what a user asks the server to run, read and checked before anything is stored.

```yaml
name: cnn                         # required; also the throughput kind unless `kind` is given
command: python examples/train_cnn.py --seed 0   # a shell line, or a list of arguments
gpus: 1                           # GPUs (or CPU slots) the job runs on; default 1
gpu_types: [v100, h100]           # allowed types; default any
total_steps: 200                  # or `epochs` × `steps_per_epoch`
priority: 1                       # weight >= 0; default 1; 0 = best effort
queue: research                   # default ""
user: alice                       # default: the user running `apportion submit`
checkpoint_dir: ckpt/cnn          # default STATE_DIR/jobs/ID/checkpoints
checkpoint_every: auto            # periodic checkpoints: auto, auto:SECONDS, off or SECONDS; default the server's
warm_start: false                 # start cold even where the server could fork it warm; default true
hung_after_s: 1800                # silent (no lease call, no progress report) this long: hung; default the server's
cpus: 4                           # CPU cores it needs at least (beside all its GPUs); default: the scheduler's split
memory_gb: 32                     # host memory it needs, GiB; a job that could never fit a node is refused
cpu_speed: "1:0.3 2:0.66 4:1"     # its speed at a few CPU cores per GPU (a trace's cpu_speed column): ranked at
                                  #   its share's speed under --cpu-split until measured (data-stalls.md)
time_limit: 12h                   # running time over all attempts, then it fails; seconds or N s/m/h/d; default none
estimated_duration_s: 2h          # its own estimate of its wall time at `gpus` on the fastest type it may use
                                  #   (seconds or N s/m/h/d, > 0, at most 10 years): qssf ranks by it, corrected
                                  #   by how wrong its user's finished estimates were (docs/durations.md)
after: [12, 14]                   # jobs that must complete before it starts; it fails if one fails or is cancelled
notify: https://hooks.example.com/apportion   # POSTed a JSON summary when the job ends (serve/notify/notifier.py)
array: 0-15                       # one job per index (0-15:2, 1,3,5-7; %4: at most 4 at once): serve/jobs/job_array.py
privacy: {blocks: [mon, tue], epsilon: 0.5, delta: 1e-7}  # privacy budget it claims: serve/jobs/privacy_spec.py
env: {LR: "0.1"}                  # extra environment variables
workdir: .                        # where the command runs; default the directory `submit` ran in
kind: resnet18/bs32               # throughput kind; default `name`
elastic:                          # an elastic job: the scheduler picks its slots each round (serve/jobs/elastic_spec.py)
  min_gpus: 1                     # fewest slots it runs on; `gpus` (default min_gpus) is its user's size
  max_gpus: 4                     # most slots it may be given
  batch_size: 128                 # the total batch over all its replicas
  init_batch_size: 128            # M0, the batch its learning rate was tuned for; default batch_size
  lr_rule: sqrt                   # sqrt, adascale or none
  target_examples: 5000000        # its target in examples, instead of total_steps (or epochs × dataset_size)
  max_batch_size: 1024            # with a target in examples: the largest batch the scheduler may choose
```

Instead of ``kind``, a job may say what it trains, as a trace row can: ``model`` (a preset of
``apportion.perf``, e.g. ``gpt3-1.3b``), ``global_batch`` (sequences per step) and ``layout``
(``tp=2 pp=1 mb=4``, as text or a mapping; left out or ``auto``: the fastest layout that fits).
Its kind is then named after them (``gpt3-1.3b gb=64 tp=2 pp=1 mb=4``) and its speed on each
slot type, until measured there, is the perf model's (``apportion.workloads.model_jobs``).

Relative ``workdir`` and ``checkpoint_dir`` are resolved against the job file's directory
(``checkpoint_dir`` against ``workdir`` when both are relative). Every field has a bound
(``apportion.serve.base.bounds``: names 256 characters, commands 16 KiB, …). Errors are one
:class:`InputError` naming the file, the line and the field.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import yaml

from apportion.core.errors import InputError
from apportion.core.limits import MAX_DURATION_S
from apportion.serve.base.bounds import (
    MAX_AFTER, MAX_ARGS, MAX_COMMAND, MAX_CPUS, MAX_ENV, MAX_ENV_VALUE, MAX_GPU_TYPES, MAX_GPUS, MAX_HUNG_AFTER_S,
    MAX_JOB_ID, MAX_MEMORY_GB, MAX_NAME, MAX_PATH, MAX_PRIORITY, MAX_STEPS, MAX_TIME_LIMIT_S, MIN_HUNG_AFTER_S,
    check_count, check_fields, check_int, check_line, check_number, check_text, clip,
)
from apportion.serve.jobs.elastic_spec import ElasticSpec, check_user_size, elastic_from_mapping
from apportion.serve.jobs.job_array import ArraySpec, read_array
from apportion.serve.jobs.notify_hosts import NotifyTarget, notify_target
from apportion.serve.jobs.privacy_spec import ClaimSpec, claim_from_mapping
from apportion.workloads.cpu_speed_column import pairs_of_cell
from apportion.workloads.yaml_file import read_yaml

MAX_CPU_POINTS = 64  # core counts one job's cpu_speed may give

FIELDS = (
    "name", "command", "gpus", "gpu_types", "total_steps", "epochs", "steps_per_epoch", "priority",
    "queue", "user", "checkpoint_dir", "env", "workdir", "kind", "checkpoint_every", "model", "global_batch",
    "layout", "elastic", "warm_start", "hung_after_s", "time_limit", "after", "notify", "array", "privacy",
    "cpus", "memory_gb", "cpu_speed", "estimated_duration_s",
)
# variables the server sets for every attempt (docs/serve-contract.md); a job may not override them
RESERVED_ENV = ("CUDA_VISIBLE_DEVICES",)
RESERVED_ENV_PREFIX = "APPORTION_"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class JobSpec:
    name: str
    command: str | list[str]  # a shell line, or argv
    total_steps: int
    gpus: int = 1
    gpu_types: tuple[str, ...] | None = None  # None: any type
    priority: float = 1.0
    queue: str = ""
    user: str | None = None
    checkpoint_dir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    kind: str | None = None
    checkpoint_every: str | None = None  # None: the server's setting (apportion.runtime.cadence)
    model: str | None = None  # a perf preset: the kind is named after it, its speeds predicted
    global_batch: int | None = None
    layout: str | None = None  # "tp=2 pp=1 mb=4"; None: planned per slot type
    elastic: ElasticSpec | None = None  # None: a fixed-size job
    warm_start: bool | None = None  # False: always a cold start; None: the server's setting
    hung_after_s: float | None = None  # seconds of silence before its attempt is hung; None: the server's
    time_limit: float | None = None  # seconds of running time over all its attempts; None: no limit
    after: tuple[int, ...] | None = None  # ids of the jobs that must complete before it starts; None: none
    notify: str | None = None  # an http(s) URL POSTed a summary when the job ends (notifier.py); None: none
    array: str | None = None  # a job array's indices, as checked text ("0-15%4"); None: one job
    privacy: ClaimSpec | None = None  # the privacy budget it claims of the server's blocks; None: none
    cpus: int | None = None  # CPU cores it needs at least, over all its GPUs; None: the scheduler decides
    memory_gb: float | None = None  # host memory it needs, GiB; None: not counted
    cpu_speed: str | None = None  # its speed at a few cores per GPU, checked text ("1:0.3 4:1"); None: not given
    estimated_duration_s: float | None = None  # its own estimate of its wall seconds (fastest type); None: none

    @property
    def throughput_kind(self) -> str:
        if self.model is not None:
            from apportion.workloads.model_jobs import ModelJob, parse_layout

            return ModelJob(self.model, self.global_batch, parse_layout(self.layout or "")).kind
        return self.kind or self.name

    def to_dict(self) -> dict:
        """Plain JSON-able fields (the body of ``POST /jobs``), leaving out what is unset. Built field by
        field (``dataclasses.asdict`` deep-copies every value: a tenth of a millisecond of each submit)."""
        data = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        data["gpu_types"] = list(self.gpu_types) if self.gpu_types is not None else None
        data["elastic"] = self.elastic.to_dict() if self.elastic is not None else None
        data["after"] = list(self.after) if self.after else None
        data["privacy"] = self.privacy.to_dict() if self.privacy is not None else None
        return {k: v for k, v in data.items() if v is not None}

    def allows(self, gpu_type: str) -> bool:
        return self.gpu_types is None or gpu_type in self.gpu_types


def _plain(value):
    """A field's value as a new container where it is one (a caller may change what it is given)."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(value)
    return value


def load_job_file(path: str | Path, *, cwd: str | Path | None = None, overrides: dict | None = None) -> JobSpec:
    """Read and check a job YAML; relative paths are made absolute. InputError on any problem.
    ``overrides``: fields that replace the file's (see :func:`overridden`), checked as the file's
    are; an error about one of them names no line of the file."""
    source = str(path)
    data, root = read_yaml(path, "job")
    lines = _key_lines(root)
    overrides = overrides or {}
    if overrides and isinstance(data, dict):
        data = overridden(data, overrides)
    try:
        spec = spec_from_mapping(data, source)
    except InputError as err:
        top = err.field.split(".")[0].split("[")[0] if err.field else None
        if err.line is None and err.field is not None and top not in overrides:
            line = lines.get(err.field) or lines.get(top)
            raise InputError(source, err.message, line=line, field=err.field) from None
        raise
    return _with_paths(spec, Path(path).resolve().parent, cwd)


def spec_from_fields(data: object, source: str, *, cwd: str | Path | None = None) -> JobSpec:
    """Check job fields given without a file (a dict in Python, flags of ``apportion submit``);
    relative paths are taken from ``cwd`` (default this process's directory). InputError naming the field."""
    base = Path(cwd).resolve() if cwd else Path.cwd()
    return _with_paths(spec_from_mapping(data, source), base, base)


def overridden(data: dict, overrides: dict) -> dict:
    """A job file's fields with ``overrides`` laid over them: ``env`` merged (an override's variable
    winning), ``total_steps`` replacing the file's ``epochs`` and ``steps_per_epoch``, any other
    field replaced."""
    merged = {**data, **overrides}
    if isinstance(data.get("env"), dict) and isinstance(overrides.get("env"), dict):
        merged["env"] = {**data["env"], **overrides["env"]}
    if overrides.get("total_steps") is not None:
        for key in ("epochs", "steps_per_epoch"):
            if key not in overrides:
                merged.pop(key, None)
    return merged


def _with_paths(spec: JobSpec, base: Path, cwd: str | Path | None) -> JobSpec:
    """``spec`` with an absolute ``workdir`` (relative: from ``base``; none: ``cwd``) and ``checkpoint_dir``
    (relative: from its ``workdir`` when that was given, else from ``base``)."""
    workdir = Path(spec.workdir).expanduser() if spec.workdir else Path(cwd) if cwd else Path.cwd()
    if not workdir.is_absolute():
        workdir = base / workdir
    checkpoint = spec.checkpoint_dir
    if checkpoint is not None:
        ckpt = Path(checkpoint).expanduser()
        checkpoint = str(ckpt if ckpt.is_absolute() else (workdir if spec.workdir else base) / ckpt)
    return _replace(spec, workdir=str(workdir.resolve()), checkpoint_dir=checkpoint)


def field_line(path: str | Path, field: str) -> int | None:
    """The line of ``field`` in a job file (None when it is not there or the file cannot be read)."""
    try:
        _, root = read_yaml(path, "job")
    except InputError:
        return None
    lines = _key_lines(root)
    return lines.get(field) or lines.get(field.split(".")[0].split("[")[0])


@dataclass(frozen=True)
class ReadJob:
    """A job file (or a ``POST /jobs`` body) read once: its spec, and what two of its text fields
    became on the way, kept so that nothing reads them again: its ``notify`` URL split
    (``notify_hosts.NotifyTarget``) and its array's indices (``job_array.ArraySpec``)."""

    spec: JobSpec
    notify: NotifyTarget | None = None
    array: ArraySpec | None = None


def spec_from_mapping(data: object, source: str) -> JobSpec:
    """Check a parsed job file (or a ``POST /jobs`` body) field by field."""
    return read_job(data, source).spec


def read_job(data: object, source: str) -> ReadJob:
    """Check a parsed job file (or a ``POST /jobs`` body) field by field, once: its spec, its notify
    URL split and its array's indices (a submit's checks and its store use these, parsing nothing again)."""
    check_fields(data, FIELDS, source, shape="a job file must be a mapping of fields (name, command, total_steps, …)")

    name = _text(data, "name", source, required=True)
    command = _command(data.get("command"), source)
    elastic = None if data.get("elastic") is None else elastic_from_mapping(data["elastic"], source)
    gpus = _positive_int(data, "gpus", source, default=elastic.min_gpus if elastic else 1, most=MAX_GPUS)
    if elastic is not None:
        check_user_size(elastic, gpus, source)
    total_steps = _steps(data, source) if elastic is None or elastic.target_examples is None else \
        _steps_to_examples(data, elastic, source)
    priority = check_number(data.get("priority", 1.0), "priority", source, least=0.0, most=MAX_PRIORITY)
    model, global_batch, layout = _model_fields(data, source, gpus)
    spec = JobSpec(  # each field checked in this order: the first that does not fit is the one named
        name=name,
        command=command,
        total_steps=total_steps,
        gpus=gpus,
        gpu_types=_gpu_types(data.get("gpu_types"), source),
        priority=priority,
        queue=_text(data, "queue", source, default=""),
        user=_text(data, "user", source, default=None),
        checkpoint_dir=_text(data, "checkpoint_dir", source, default=None, most=MAX_PATH),
        env=_env(data.get("env"), source),
        workdir=_text(data, "workdir", source, default=None, most=MAX_PATH),
        kind=_text(data, "kind", source, default=None),
        checkpoint_every=_checkpoint_every(data.get("checkpoint_every"), source),
        model=model,
        global_batch=global_batch,
        layout=layout,
        elastic=elastic,
        warm_start=_warm_start(data.get("warm_start"), source),
        hung_after_s=None if data.get("hung_after_s") is None else check_number(
            data["hung_after_s"], "hung_after_s", source, least=MIN_HUNG_AFTER_S, most=MAX_HUNG_AFTER_S),
        time_limit=_time_limit(data.get("time_limit"), source),
        after=_after(data.get("after"), source),
        notify=None if (target := _notify(data.get("notify"), source)) is None else target.url,
        array=None if (array := _array(data.get("array"), source)) is None else array[0],
        privacy=None if data.get("privacy") is None else claim_from_mapping(data["privacy"], source),
        cpus=None if data.get("cpus") is None else check_int(data["cpus"], "cpus", source, least=1, most=MAX_CPUS),
        memory_gb=None if data.get("memory_gb") is None else check_number(
            data["memory_gb"], "memory_gb", source, least=1 / 1024, most=MAX_MEMORY_GB),
        cpu_speed=_cpu_speed(data.get("cpu_speed"), source),
        estimated_duration_s=_estimated_duration(data.get("estimated_duration_s"), source),
    )
    return ReadJob(spec, target, None if array is None else array[1])


def _cpu_speed(value: object, source: str) -> str | None:
    """``cpu_speed`` as checked text (``1:0.3 2:0.66 4:1``): the trace column's form, or a mapping of
    cores per GPU to speed; at most MAX_CPU_POINTS points."""
    if value is None:
        return None
    if isinstance(value, dict):
        if len(value) > MAX_CPU_POINTS:
            raise InputError(source, f"gives {len(value):,} core counts, more than {MAX_CPU_POINTS}", field="cpu_speed")
        value = " ".join(f"{k}:{v}" for k, v in value.items())
    if not isinstance(value, str) or not value.strip():
        raise InputError(source, f"must be CORES:SPEED pairs such as '1:0.3 2:0.66 4:1' (or a mapping of cores "
                                 f"per GPU to speed), got {_short(value)}", field="cpu_speed")
    check_line(value, "cpu_speed", source, most=MAX_CPU_POINTS * 40)
    if len(value.split()) > MAX_CPU_POINTS:
        raise InputError(source, f"gives {len(value.split()):,} core counts, more than {MAX_CPU_POINTS}",
                         field="cpu_speed")
    cores, speed = pairs_of_cell(value, source, field="cpu_speed")
    return " ".join(f"{c:.12g}:{v:.12g}" for c, v in zip(cores.tolist(), speed.tolist()))


def _notify(value: object, source: str) -> NotifyTarget | None:
    return None if value is None else notify_target(value, source)


def _array(value: object, source: str) -> tuple[str, ArraySpec] | None:
    return None if value is None else read_array(value, source)


def check_stored(spec: object, source: str) -> None:
    """InputError naming the field when a job's stored spec holds what a round or a start would use
    and submit now refuses (a server of an older version checked less): its slot count, model, batch
    and layout, and its command, environment, directories and checkpoint and start settings."""
    if not isinstance(spec, dict):
        raise InputError(source, f"the stored job is not a mapping of fields, got {_short(spec)}")
    _model_fields(spec, source, _positive_int(spec, "gpus", source, default=1, most=MAX_GPUS))
    _command(spec.get("command"), source)
    _env(spec.get("env"), source)
    for key in ("workdir", "checkpoint_dir"):
        _text(spec, key, source, most=MAX_PATH)
    _checkpoint_every(spec.get("checkpoint_every"), source)
    _warm_start(spec.get("warm_start"), source)


def _model_fields(data: dict, source: str, gpus: int) -> tuple[str | None, int | None, str | None]:
    """``model``, ``global_batch`` and ``layout`` (normalised text), checked against the perf model
    as the job will run: its layout on its ``gpus`` slots."""
    from apportion.workloads.model_jobs import ModelJob, check_model_job, parse_layout

    if data.get("model") is None:
        for key in ("global_batch", "layout"):
            if data.get(key) is not None:
                raise InputError(source, "describes a model: give the model too (a preset such as gpt3-1.3b)",
                                 field=key)
        return None, None, None
    if data.get("kind") is not None:
        raise InputError(source, "a job names either a kind or a model, not both", field="model")
    model = _text(data, "model", source, required=True)
    if data.get("global_batch") is None:
        raise InputError(source, "is required with model (sequences per step)", field="global_batch")
    global_batch = _positive_int(data, "global_batch", source)
    raw = data.get("layout")
    if isinstance(raw, dict):
        raw = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in raw.items())
    elif raw is not None and (isinstance(raw, bool) or not isinstance(raw, str)):
        raise InputError(source, f"must be text such as 'tp=2 pp=1 mb=4' or a mapping, got {_short(raw)}",
                         field="layout")
    try:
        layout = parse_layout(check_line(raw or "", "layout", source))
    except ValueError as err:
        raise InputError(source, str(err), field="layout") from None
    job = ModelJob(model, global_batch, layout)
    try:
        check_model_job(job, gpus)
    except ValueError as err:
        field = "layout" if str(err).startswith("layout:") else "model"
        raise InputError(source, str(err).removeprefix("layout: "), field=field) from None
    text = None if layout is None else " ".join(f"{k}={v}" for k, v in layout)
    return model, global_batch, text


def _replace(spec: JobSpec, **changes) -> JobSpec:
    return replace(spec, **{name: _plain(value) for name, value in changes.items()})


def _text(data: dict, key: str, source: str, *, required: bool = False, default=None, most: int = MAX_NAME):
    """A string field (a number is taken as its text): one line of at most MAX_NAME characters,
    or for a path (``most=MAX_PATH``) any text without NUL."""
    value = data.get(key)
    if value is None:
        if required:
            raise InputError(source, "is required", field=key)
        return default
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(source, f"must be a string, got {type(value).__name__}", field=key)
    text = str(value).strip()
    if required and not text:
        raise InputError(source, "must not be empty", field=key)
    if most == MAX_NAME:
        return check_line(text, key, source)
    return check_text(text, key, source, most=most)


def _command(value: object, source: str) -> str | list[str]:
    if value is None:
        raise InputError(source, "is required: a shell line, or a list of arguments", field="command")
    if isinstance(value, str):
        if not value.strip():
            raise InputError(source, "must not be empty", field="command")
        return check_text(value.strip(), "command", source, most=MAX_COMMAND)
    if isinstance(value, list) and value:
        check_count(value, "command", source, most=MAX_ARGS, what="arguments")
        args = []
        for i, arg in enumerate(value):
            if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
                raise InputError(source, f"must be a string, got {_short(arg)}", field=f"command[{i}]")
            args.append(check_text(str(arg), f"command[{i}]", source, most=MAX_COMMAND))
        if sum(len(a) for a in args) > MAX_COMMAND:
            raise InputError(source, f"must be at most {MAX_COMMAND:,} characters in all", field="command")
        return args
    raise InputError(source, f"must be a shell line or a non-empty list of arguments, got {_short(value)}",
                     field="command")


def _positive_int(data: dict, key: str, source: str, *, default: int | None = None, most: int = MAX_STEPS) -> int:
    """A whole number from 1 to ``most`` (a float such as ``1e3`` is taken when it is whole)."""
    return check_int(data.get(key, default), key, source, least=1, most=most)


def _steps(data: dict, source: str) -> int:
    """``total_steps``, or ``epochs`` × ``steps_per_epoch``; at most MAX_STEPS (2**53) either way."""
    has_total = data.get("total_steps") is not None
    has_epochs = data.get("epochs") is not None or data.get("steps_per_epoch") is not None
    if has_total and has_epochs:
        raise InputError(source, "give total_steps, or epochs and steps_per_epoch, not both", field="total_steps")
    if has_total:
        return _positive_int(data, "total_steps", source)
    if has_epochs:
        if data.get("epochs") is None:
            raise InputError(source, "is required with steps_per_epoch", field="epochs")
        if data.get("steps_per_epoch") is None:
            raise InputError(source, "is required with epochs", field="steps_per_epoch")
        total = _positive_int(data, "epochs", source) * _positive_int(data, "steps_per_epoch", source)
        if total > MAX_STEPS:
            raise InputError(source, f"epochs × steps_per_epoch is {total:.3g}, more than {MAX_STEPS:,} (2**53) steps",
                             field="steps_per_epoch")
        return total
    raise InputError(source, "is required (or epochs and steps_per_epoch)", field="total_steps")


def _steps_to_examples(data: dict, elastic: ElasticSpec, source: str) -> int:
    """An elastic job whose target is in examples has no total_steps of its own: the steps its target takes
    at its own batch (the server recounts them at the batch of each attempt)."""
    for key in ("total_steps", "epochs", "steps_per_epoch"):
        if data.get(key) is not None:
            raise InputError(source, "give the target in steps or in examples (elastic.target_examples, or "
                             "elastic.epochs and elastic.dataset_size), not both", field=key)
    return -(-elastic.target_examples // elastic.batch_size)


def _warm_start(value: object, source: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InputError(source, f"must be true or false, got {_short(value)}", field="warm_start")


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?)\s*([smhd]?)\s*")


def _time_limit(value: object, source: str) -> float | None:
    """Seconds, as a number or as text with a unit (``90m``, ``12h``, ``2d``, ``3600s``)."""
    if value is None:
        return None
    return check_number(_with_unit(value, "time_limit", source), "time_limit", source, least=1.0,
                        most=MAX_TIME_LIMIT_S)


def _with_unit(value: object, name: str, source: str) -> object:
    """``value`` as seconds where it is text with a unit (``90m``, ``12h``, ``2d``, ``3600s``); else as it is."""
    if not isinstance(value, str):
        return value
    match = _DURATION.fullmatch(value)
    if match is None:
        raise InputError(source, f"must be seconds, or a number with a unit s, m, h or d (90m, 12h), got "
                         f"{_short(value)}", field=name)
    return float(match.group(1)) * _UNITS[match.group(2)]


def _estimated_duration(value: object, source: str) -> float | None:
    """The job's own estimate of its wall seconds, as the trace column's (> 0, at most 10 years): a
    number, or text with a unit as ``time_limit``'s (``90m``, ``12h``)."""
    if value is None:
        return None
    shown = _short(value)
    value = _with_unit(value, "estimated_duration_s", source)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InputError(source, f"must be seconds, or a number with a unit s, m, h or d (90m, 12h), got {shown}",
                         field="estimated_duration_s")
    seconds = float(value) if not isinstance(value, int) or abs(value) < 2**63 else math.inf
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_DURATION_S):
        raise InputError(source, f"must be > 0 and at most {MAX_DURATION_S:,.0f} s (10 years), got {shown}",
                         field="estimated_duration_s")
    return seconds


def _after(value: object, source: str) -> tuple[int, ...] | None:
    """Job ids, as a list (``[12, 14]``, or the ids as text, as ``apportion jobs`` shows them) or one id."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    check_count(items, "after", source, most=MAX_AFTER, what="jobs", verb="name")
    ids: list[int] = []
    for i, item in enumerate(items):
        where = f"after[{i}]" if isinstance(value, list) else "after"
        if isinstance(item, str) and item.strip().isascii() and item.strip().isdigit():  # not "²" nor "١٢"
            item = int(item.strip())
        job_id = check_int(item, where, source, least=1, most=MAX_JOB_ID)
        if job_id not in ids:
            ids.append(job_id)
    return tuple(ids) or None


def check_after(after: tuple[int, ...] | None, owner_of: dict[int, str], user: str, sees_all: bool,
                source: str) -> None:
    """InputError naming ``after`` unless every job it names exists (``owner_of``: the user of each
    that does) and is ``user``'s own, or ``sees_all`` (an admin's submit, an open server)."""
    for job_id in after or ():
        owner = owner_of.get(job_id)
        if owner is None:
            raise InputError(source, f"no job {job_id} on this server", field="after")
        if owner != user and not sees_all:
            raise InputError(source, f"job {job_id} is {owner}'s: a job may wait only for its own user's jobs "
                             "(an admin's may wait for anyone's)", field="after")


def _checkpoint_every(value: object, source: str) -> str | None:
    """``auto``, ``auto:SECONDS``, ``off`` or ``SECONDS``, as apportion.runtime reads it (YAML's ``off`` is False)."""
    if value is None:
        return None
    if value is False:
        value = "off"
    from apportion.runtime.cadence import CheckpointEvery

    try:
        return str(CheckpointEvery.parse(value))
    except ValueError:
        raise InputError(source, f"must be auto, auto:SECONDS, off or a number of seconds, got {value!r}",
                         field="checkpoint_every") from None


def _gpu_types(value: object, source: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.split(",")]
    if not isinstance(value, list) or not value:
        raise InputError(source, f"must be a list of GPU types such as [v100, cpu], got {_short(value)}",
                         field="gpu_types")
    check_count(value, "gpu_types", source, most=MAX_GPU_TYPES, what="types", verb="list")
    types = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise InputError(source, f"must be a GPU type name, got {_short(item)}", field=f"gpu_types[{i}]")
        name = check_line(item.strip().lower(), f"gpu_types[{i}]", source)
        if name not in types:
            types.append(name)
    return tuple(types)


def _env(value: object, source: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(source, f"must be a mapping of variable to value, got {_short(value)}", field="env")
    check_count(value, "env", source, most=MAX_ENV, what="variables", verb="set")
    env = {}
    for key, item in value.items():
        name = str(key)
        where = f"env.{clip(name)}"
        if len(name) > MAX_NAME or not _ENV_NAME.fullmatch(name):
            raise InputError(source, f"is not a valid environment variable name (letters, digits and _, "
                             f"at most {MAX_NAME} characters)", field=where)
        if name.startswith(RESERVED_ENV_PREFIX) or name in RESERVED_ENV:
            raise InputError(source, "is set by the server for every attempt; a job may not set it", field=where)
        if isinstance(item, bool):
            item = "1" if item else "0"
        if not isinstance(item, (str, int, float)):
            raise InputError(source, f"must be a string or a number, got {_short(item)}", field=where)
        env[name] = check_text(str(item), where, source, most=MAX_ENV_VALUE)
    return env


def _short(value: object) -> str:
    """``repr(value)``, cut short for an error message."""
    return clip(repr(value), 80)


def _key_lines(root: yaml.Node | None) -> dict[str, int]:
    """1-based line of each top-level key, and of ``env.NAME`` and ``command[i]`` / ``gpu_types[i]``."""
    lines: dict[str, int] = {}
    if not isinstance(root, yaml.MappingNode):
        return lines
    for key, value in root.value:
        name = str(key.value)
        lines[name] = key.start_mark.line + 1
        if isinstance(value, yaml.MappingNode):
            for sub_key, _ in value.value:
                lines[f"{name}.{sub_key.value}"] = sub_key.start_mark.line + 1
        elif isinstance(value, yaml.SequenceNode):
            for i, item in enumerate(value.value):
                lines[f"{name}[{i}]"] = item.start_mark.line + 1
    return lines


def default_user() -> str:
    """The OS user running this process (the identity a client sends by default)."""
    try:
        import getpass

        return getpass.getuser()
    except Exception:  # no passwd entry, e.g. in a container with an arbitrary uid
        return os.environ.get("USER", "") or str(os.getuid())

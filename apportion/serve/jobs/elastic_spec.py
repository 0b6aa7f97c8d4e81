"""The ``elastic:`` part of a job file: the limits within which the scheduler sizes a job.

```yaml
elastic:
  min_gpus: 1              # fewest slots it runs on (default 1)
  max_gpus: 4              # most slots it may be given (required)
  batch_size: 128          # the total batch, split over however many replicas run (required)
  init_batch_size: 128     # M0: the batch its learning rate was tuned for (default batch_size)
  lr_rule: sqrt            # how the learning rate follows the batch: sqrt, adascale or none (default sqrt)
  min_local_batch: 1       # the smallest share of the batch worth giving one replica (default 1)
  max_local_batch: 128     # the most one replica holds in memory at once (default batch_size)
  model: cifar10           # a built-in elastic kind whose step-time model is the prior (default none)
  target_examples: 5000000 # its target in examples (or epochs × dataset_size); default: total_steps at batch_size
  max_batch_size: 1024     # the largest total batch the scheduler may choose (default batch_size: the batch is kept)
```

An elastic job runs one process per slot (``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``,
``MASTER_PORT``), told its batch and learning-rate rule (``APPORTION_BATCH_SIZE``,
``APPORTION_INIT_BATCH_SIZE``, ``APPORTION_LR_RULE``; apportion.runtime.elastic).

Its target is its ``total_steps`` at ``batch_size`` (a step is the same work on one slot or
four, and the batch stays the user's), or a number of examples: ``target_examples``, or
``epochs`` × ``dataset_size``. Only a target in examples lets the scheduler choose the batch,
between M0 and ``max_batch_size``; the job is told it at each (re)start
(``APPORTION_BATCH_SIZE``, with ``APPORTION_TARGET_EXAMPLES``) and stops at its examples
(serve/estimates/elastic_batch.py). Errors are InputErrors naming ``elastic.FIELD``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from apportion.core.errors import InputError
from apportion.serve.base.bounds import MAX_BATCH, MAX_GPUS, MAX_STEPS, check_fields, check_int, check_line, clip

MAX_EXAMPLES = MAX_STEPS  # an elastic job's target in examples (2**53)

LR_RULES = ("sqrt", "adascale", "none")  # as apportion.runtime.elastic reads APPORTION_LR_RULE
FIELDS = ("min_gpus", "max_gpus", "batch_size", "init_batch_size", "lr_rule", "min_local_batch", "max_local_batch",
          "model", "target_examples", "epochs", "dataset_size", "max_batch_size")


@dataclass(frozen=True)
class ElasticSpec:
    max_gpus: int
    batch_size: int
    min_gpus: int = 1
    init_batch_size: int | None = None  # None: batch_size
    lr_rule: str = "sqrt"
    min_local_batch: int = 1
    max_local_batch: int | None = None  # None: batch_size
    model: str | None = None  # a built-in elastic kind (apportion.workloads.elastic_kinds): the step-time prior
    target_examples: int | None = None  # None: the job's total_steps at batch_size
    max_batch_size: int | None = None  # None: batch_size (the scheduler keeps the batch)

    @property
    def m0(self) -> int:
        return self.init_batch_size if self.init_batch_size is not None else self.batch_size

    @property
    def largest_local_batch(self) -> int:
        return self.max_local_batch if self.max_local_batch is not None else self.batch_size

    @property
    def largest_batch(self) -> int:
        """The largest total batch the scheduler may give the job (its own when it chooses none)."""
        return self.max_batch_size if self.max_batch_size is not None else self.batch_size

    @property
    def chooses_batch(self) -> bool:
        """The scheduler picks this job's batch at each (re)start: a target in examples, and room to grow."""
        return self.target_examples is not None and self.max_batch_size is not None and self.max_batch_size > self.m0

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict) -> ElasticSpec:
        """From what :meth:`to_dict` stored (already checked)."""
        return cls(**{k: v for k, v in data.items() if k in FIELDS})


def elastic_from_mapping(value: object, source: str) -> ElasticSpec | None:
    """Check a job file's ``elastic`` mapping field by field (None when there is none)."""
    if value is None:
        return None
    check_fields(value, FIELDS, source, field="elastic",
                 shape=f"must be a mapping of min_gpus, max_gpus, batch_size, …, got {clip(repr(value), 80)}")

    def whole(key: str, *, default=None, least: int = 1, most: int = MAX_BATCH) -> int | None:
        if value.get(key) is None:
            if default is _REQUIRED:
                raise InputError(source, "is required for an elastic job", field=f"elastic.{key}")
            return default
        return check_int(value[key], f"elastic.{key}", source, least=least, most=most)

    min_gpus = whole("min_gpus", default=1, most=MAX_GPUS)
    max_gpus = whole("max_gpus", default=_REQUIRED, most=MAX_GPUS)
    if max_gpus < min_gpus:
        raise InputError(source, f"must be at least min_gpus ({min_gpus}), got {max_gpus}", field="elastic.max_gpus")
    batch = whole("batch_size", default=_REQUIRED)
    init = whole("init_batch_size")
    if init is not None and init > batch:
        raise InputError(source, f"M0 must be at most batch_size ({batch:,}), got {init:,}",
                         field="elastic.init_batch_size")
    min_local = whole("min_local_batch", default=1)
    max_local = whole("max_local_batch")
    if max_local is not None and max_local < min_local:
        raise InputError(source, f"must be at least min_local_batch ({min_local:,}), got {max_local:,}",
                         field="elastic.max_local_batch")
    if max_gpus * min_local > batch:
        raise InputError(source, f"a batch of {batch:,} cannot give {max_gpus:,} replicas {min_local:,} example(s) "
                         f"each: lower max_gpus to {max(batch // min_local, 1):,} or raise batch_size",
                         field="elastic.max_gpus")
    rule = value.get("lr_rule", "sqrt")
    if not isinstance(rule, str) or rule.strip().lower() not in LR_RULES:
        raise InputError(source, f"must be one of {', '.join(LR_RULES)}, got {clip(repr(rule), 40)}",
                         field="elastic.lr_rule")
    model = value.get("model")
    if model is not None:
        from apportion.workloads.elastic_kinds import elastic_kinds_document

        names = tuple(elastic_kinds_document()["kinds"])
        if not isinstance(model, str) or model.strip() not in names:
            raise InputError(source, f"must be a built-in elastic kind ({', '.join(names)}), got "
                             f"{clip(repr(model), 40)}", field="elastic.model")
        model = check_line(model.strip(), "elastic.model", source)
    target = _target_examples(value, whole, source)
    largest = whole("max_batch_size")
    if largest is not None:
        if largest < batch:
            raise InputError(source, f"must be at least batch_size ({batch:,}), got {largest:,}",
                             field="elastic.max_batch_size")
        if largest > batch and target is None:
            raise InputError(source, "lets the scheduler change the batch, so the job's target must be in examples: "
                             "give elastic.target_examples (or elastic.epochs and elastic.dataset_size)",
                             field="elastic.max_batch_size")
    return ElasticSpec(max_gpus=max_gpus, batch_size=batch, min_gpus=min_gpus, init_batch_size=init,
                       lr_rule=rule.strip().lower(), min_local_batch=min_local, max_local_batch=max_local, model=model,
                       target_examples=target, max_batch_size=largest)


def _target_examples(value: dict, whole, source: str) -> int | None:
    """``target_examples``, or ``epochs`` × ``dataset_size`` (None when neither is given)."""
    has_epochs = value.get("epochs") is not None or value.get("dataset_size") is not None
    if value.get("target_examples") is not None:
        if has_epochs:
            raise InputError(source, "give target_examples, or epochs and dataset_size, not both",
                             field="elastic.target_examples")
        return whole("target_examples", most=MAX_EXAMPLES)
    if not has_epochs:
        return None
    for key, other in (("epochs", "dataset_size"), ("dataset_size", "epochs")):
        if value.get(key) is None:
            raise InputError(source, f"is required with elastic.{other}", field=f"elastic.{key}")
    epochs, size = whole("epochs", most=MAX_EXAMPLES), whole("dataset_size", most=MAX_EXAMPLES)
    if epochs * size > MAX_EXAMPLES:
        raise InputError(source, f"epochs × dataset_size is {epochs * size:.3g}, more than {MAX_EXAMPLES:,} (2**53) "
                         "examples", field="elastic.dataset_size")
    return epochs * size


def check_user_size(elastic: ElasticSpec, gpus: int, source: str) -> None:
    """The job's own size (``gpus``: what fixed-size policies give it) must lie within its limits."""
    if not elastic.min_gpus <= gpus <= elastic.max_gpus:
        raise InputError(source, f"an elastic job's own size must lie within elastic.min_gpus and elastic.max_gpus "
                         f"({elastic.min_gpus} to {elastic.max_gpus}), got {gpus}", field="gpus")


_REQUIRED = object()

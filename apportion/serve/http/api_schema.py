"""The API's request bodies and answers as JSON Schema, for the OpenAPI document only.

The server checks every body by hand (``jobspec.py``, ``bodies.py``), so that an error names
the field; these schemas describe the same fields and bounds (lengths, ranges, the characters a
name may hold, the fields a body may have) to a reader of ``/docs``, to generated clients and to
fuzzers, and check nothing: a body valid by its schema passes the server's checks of each field,
and what the server alone can judge (a model its catalog knows, a job that exists) is said in the
route's 400. ``tests/serve/test_api_docs.py`` holds them to the job file's fields and the bounds.
"""

from __future__ import annotations

from apportion.serve.base.bounds import (
    MAX_AFTER, MAX_ARGS, MAX_ARRAY_TASKS, MAX_ARRAY_TEXT, MAX_ATTEMPT, MAX_COMMAND, MAX_CPUS, MAX_ENV, MAX_ENV_VALUE,
    MAX_GPU_TYPES, MAX_GPUS, MAX_HUNG_AFTER_S, MAX_MEMORY_GB,
    MAX_JOB_ID, MAX_NAME, MAX_PATH, MAX_PRIORITY, MAX_URL, MAX_TIME_LIMIT_S, MIN_HUNG_AFTER_S,
)
from apportion.core.limits import MAX_DURATION_S
from apportion.runtime.client import MAX_SKIPPED, MAX_SKIPPED_CHARS
from apportion.runtime.stalls import FETCH, PREPROCESS, STALL
from apportion.serve.base.bounds import MAX_BATCH, MAX_NOISE_SCALE, MAX_STEP_S
from apportion.serve.base.schema_words import LINE, NAMED, NO_NUL, NOT_BLANK, _text, _whole
from apportion.serve.jobs.elastic_spec import LR_RULES, MAX_EXAMPLES
from apportion.serve.jobs.jobspec import RESERVED_ENV, RESERVED_ENV_PREFIX
from apportion.serve.resources import registry
from apportion.serve.store.state import STATUSES
from apportion.serve.store.usage import GROUPINGS, MAX_FILTER, STATE_WORDS


ELASTIC = {
    "type": "object",
    "description": "An elastic job, sized by the scheduler each round (docs/serve.md, \"Elastic jobs\"). The server "
                   "also refuses max_gpus under min_gpus, init_batch_size over batch_size, max_local_batch under "
                   "min_local_batch, a batch_size too small to give max_gpus replicas min_local_batch each, and "
                   "max_batch_size over batch_size without a target in examples.",
    "required": ["max_gpus", "batch_size"],
    "additionalProperties": False,
    "dependentRequired": {"epochs": ["dataset_size"], "dataset_size": ["epochs"]},
    "not": {"required": ["target_examples", "epochs"]},
    "properties": {
        "min_gpus": _whole("The fewest GPUs it runs on; default 1.", most=MAX_GPUS),
        "max_gpus": _whole("The most GPUs it runs on.", most=MAX_GPUS),
        "batch_size": _whole("Examples a step, over all its replicas.", most=MAX_BATCH),
        "init_batch_size": _whole("The batch it starts at (M0); default batch_size.", most=MAX_BATCH),
        "lr_rule": {"type": "string", "enum": list(LR_RULES),
                    "description": "How its learning rate follows its batch; default sqrt."},
        "min_local_batch": _whole("The fewest examples a replica takes; default 1.", most=MAX_BATCH),
        "max_local_batch": _whole("The most examples a replica takes.", most=MAX_BATCH),
        "model": _text("A built-in elastic kind (cifar10, bert, ...) whose step-time model is the prior.",
                       pattern=NAMED),
        "target_examples": _whole("Its target in examples, instead of total_steps.", most=MAX_EXAMPLES),
        "epochs": _whole("With dataset_size: its target in examples.", most=MAX_EXAMPLES),
        "dataset_size": _whole("With epochs: its target in examples.", most=MAX_EXAMPLES),
        "max_batch_size": _whole("The largest batch the scheduler may choose (a target in examples needed).",
                                 most=MAX_BATCH),
    },
}

JOB_SPEC = {
    "type": "object",
    "title": "JobSpec",
    "description": "A job, with the fields of a job file (docs/serve.md, \"Job files\"). A field that does not fit "
                   "is answered 400 with {detail, field, message} naming it; nothing is stored.",
    "required": ["name", "command"],
    "additionalProperties": False,  # an unknown field is refused: it is a typo more often than a newer client's
    "dependentRequired": {"epochs": ["steps_per_epoch"], "steps_per_epoch": ["epochs"], "global_batch": ["model"],
                          "layout": ["model"], "model": ["global_batch"]},
    # total_steps, or epochs and steps_per_epoch, or an elastic job's target; a kind or a model, not both
    "anyOf": [{"required": ["total_steps"]}, {"required": ["epochs"]}, {"required": ["elastic"]}],
    "not": {"anyOf": [{"required": ["total_steps", "epochs"]}, {"required": ["kind", "model"]}]},
    "properties": {
        "name": _text("The job's name; also its throughput kind unless `kind` is given.", pattern=NAMED),
        "command": {"description": f"A shell line, or a list of arguments (at most {MAX_ARGS:,}); at most "
                                   f"{MAX_COMMAND:,} characters in all; no NUL.",
                    "anyOf": [{"type": "string", "maxLength": MAX_COMMAND, "pattern": NOT_BLANK},
                              {"type": "array", "items": {"type": "string", "maxLength": MAX_COMMAND,
                                                          "pattern": NO_NUL},
                               "minItems": 1, "maxItems": MAX_ARGS}]},
        "gpus": _whole("GPUs (or CPU slots) the job runs on; default 1.", most=MAX_GPUS),
        "gpu_types": {"type": "array", "items": {"type": "string", "maxLength": MAX_NAME, "pattern": NAMED},
                      "minItems": 1, "maxItems": MAX_GPU_TYPES,
                      "description": "The GPU types it may run on (v100, h100, cpu, ...); default any."},
        "total_steps": _whole("Steps it trains for; or give epochs and steps_per_epoch."),
        "epochs": _whole("With steps_per_epoch, instead of total_steps."),
        "steps_per_epoch": _whole("With epochs, instead of total_steps."),
        "priority": {"type": "number", "minimum": 0, "maximum": MAX_PRIORITY,
                     "description": "Its weight; default 1; 0 is best effort."},
        "queue": _text("Its queue; default \"\"."),
        "user": _text("Who submits it: on a server without credentials, required; with them, only an admin may "
                      "name another user than the credential's.", pattern=NAMED),
        "checkpoint_dir": _text("Where its checkpoints go; default STATE_DIR/jobs/ID/checkpoints.", MAX_PATH, NO_NUL),
        "env": {"type": "object", "maxProperties": MAX_ENV,
                "propertyNames": {"maxLength": MAX_NAME, "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                                  "not": {"anyOf": [{"pattern": f"^{RESERVED_ENV_PREFIX}"},
                                                    *({"const": name} for name in RESERVED_ENV)]}},
                "additionalProperties": {"type": "string", "maxLength": MAX_ENV_VALUE, "pattern": NO_NUL},
                "description": "Extra environment variables (names [A-Za-z_][A-Za-z0-9_]*; not APPORTION_* nor "
                               "CUDA_VISIBLE_DEVICES)."},
        "workdir": _text("Where the command runs (an absolute path on the server's machine).", MAX_PATH, NO_NUL),
        "kind": _text("Its throughput kind; default its name."),
        "checkpoint_every": {"type": "string", "description": "Periodic checkpoints: auto, auto:SECONDS, off or "
                                                              "SECONDS; default the server's."},
        "model": _text("A preset of the perf model (gpt3-1.3b, ...), instead of kind: its speeds are predicted.",
                       pattern=NAMED),
        "global_batch": _whole("Sequences per step; required with model."),
        "layout": {"description": "With model: tp=2 pp=1 mb=4, as text or a mapping; default the best layout.",
                   "anyOf": [{"type": "string", "maxLength": MAX_NAME, "pattern": LINE}, {"type": "object"}]},
        "elastic": ELASTIC,
        "warm_start": {"type": "boolean", "description": "false: always start cold; default the server's setting."},
        "hung_after_s": {"type": "number", "minimum": MIN_HUNG_AFTER_S, "maximum": MAX_HUNG_AFTER_S,
                         "description": "Seconds of silence (no lease call, no progress report) before its attempt "
                                        "is hung; default the server's."},
        "time_limit": {"description": "Running time over all its attempts, then it fails: seconds, or text with a "
                                      "unit s, m, h or d (90m, 12h).",
                       "anyOf": [{"type": "number", "minimum": 1, "maximum": MAX_TIME_LIMIT_S}, {"type": "string"}]},
        "estimated_duration_s": {"description": "Its own estimate of its wall time at its GPU count on the fastest type it "
                                                "may use: seconds, or text with a unit s, m, h or d (90m, 12h); > 0, "
                                                "at most 10 years. qssf ranks by it, corrected by how wrong its user's "
                                                "finished estimates were.",
                                 "anyOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DURATION_S},
                                           {"type": "string"}]},
        "cpus": {"type": "integer", "minimum": 1, "maximum": MAX_CPUS,
                 "description": "CPU cores it needs at least, over all its GPUs; default the scheduler's split."},
        "memory_gb": {"type": "number", "minimum": 1 / 1024, "maximum": MAX_MEMORY_GB,
                      "description": "Host memory it needs, GiB; refused if no node has that much."},
        "cpu_speed": {"description": "Its speed at a few CPU cores per GPU, as CORES:SPEED pairs ('1:0.3 2:0.66 4:1', "
                                     "only the ratios count) or a mapping of cores to speed: under --cpu-split it is "
                                     "ranked at the speed its share of cores allows until that is measured.",
                      "anyOf": [{"type": "string", "maxLength": 2560}, {"type": "object", "maxProperties": 64}]},
        "after": {"type": "array", "maxItems": MAX_AFTER,
                  "items": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_JOB_ID},
                                      {"type": "string", "pattern": "^[0-9]{1,18}$"}]},
                  "description": "Ids of jobs that must complete before it starts (the submitting user's own)."},
        "array": {"description": f"A job array: one job per index, each with APPORTION_ARRAY_INDEX: a range "
                                f"(0-15), with a step (0-15:2), a list (1,3,5-7), or a list of indices; %N after it: "
                                f"at most N tasks under way at once. At most {MAX_ARRAY_TASKS:,} tasks.",
                  "anyOf": [{"type": "string", "maxLength": MAX_ARRAY_TEXT}, {"type": "integer", "minimum": 0},
                            {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": MAX_ARRAY_TASKS}]},
        "notify": {"type": "string", "maxLength": MAX_URL, "format": "uri",
                   "description": "An http(s) URL POSTed a JSON summary when the job ends; where it may point is the "
                                  "server's --notify-hosts."},
        **registry.job_fields(),  # what the optional resources read of a job file (privacy: its claim)
    },
}

SUBMITTED = {
    "type": "object",
    "title": "Submitted",
    "properties": {"id": {"type": "string", "description": "The job's id."},
                   "user": {"type": "string", "description": "Whose job it is."},
                   "existing": {"type": "boolean", "description": "true: the Idempotency-Key was seen before, and "
                                                                  "this is the job stored then."}},
}

CANCEL = {
    "type": "object",
    "title": "Cancel",
    "properties": {"user": _text("Who asks, on a server without credentials; with them, the credential's user "
                                 "(an admin may name anyone).")},
}

LEASE = {
    "type": "object",
    "title": "Lease",
    "description": "An attempt's lease call, with its own credential (APPORTION_TOKEN); docs/serve-contract.md.",
    "required": ["attempt"],
    "properties": {
        "attempt": _whole("The attempt's number (APPORTION_ATTEMPT).", least=0, most=MAX_ATTEMPT),
        "steps_done": _whole("Steps done so far.", least=0),
        "skipped_checkpoints": {"type": "array", "maxItems": MAX_SKIPPED,
                                "items": {"type": "string", "maxLength": MAX_SKIPPED_CHARS, "pattern": LINE},
                                "description": "Checkpoints its restore passed over: \"step-XXXXXXXX.pt: why\"."},
    },
}

PROGRESS = {
    "type": "object",
    "title": "Progress",
    "description": "An attempt's progress report, with its own credential; an elastic job adds what it"
                   " measured; a job that times its waits for data, its data stall.",
    "required": ["attempt", "steps_done"],
    "dependentRequired": {FETCH: [STALL], PREPROCESS: [STALL]},
    "properties": {
        "attempt": _whole("The attempt's number.", least=0, most=MAX_ATTEMPT),
        "steps_done": _whole("Steps done so far.", least=0),
        "steps_per_s": {"type": "number", "minimum": 0, "description": "Its speed now."},
        "noise_scale": {"type": "number", "minimum": 0, "maximum": MAX_NOISE_SCALE,
                        "description": "Elastic: gradient noise scale, in examples."},
        "sync_s": {"type": "number", "minimum": 0, "maximum": MAX_STEP_S,
                   "description": "Elastic: seconds a step synchronises."},
        "micro_batch": {"type": "number", "minimum": 1, "maximum": MAX_BATCH,
                        "description": "Elastic: examples per micro-batch."},
        "micro_batches": _whole("Elastic: micro-batches a step, per replica.", most=MAX_BATCH),
        "nodes": _whole("Elastic: nodes it runs on.", most=MAX_GPUS),
        "examples_done": _whole("Elastic, with a target in examples: examples done so far.", least=0),
        STALL: {"type": "number", "minimum": 0, "maximum": 1,
                       "description": "The share of its step time spent waiting for data since its last report."},
        FETCH: {"type": "number", "minimum": 0, "maximum": 1,
                        "description": "Of data_stall, the share fetching (I/O), where the job knows it."},
        PREPROCESS: {"type": "number", "minimum": 0, "maximum": 1,
                             "description": "Of data_stall, the share pre-processing (CPU), where the job knows it."},
    },
}

ERROR = {
    "type": "object",
    "title": "Error",
    "properties": {"detail": {"type": "string", "description": "What is wrong, in one line."},
                   "field": {"type": ["string", "null"], "description": "The field it is about, if any."},
                   "message": {"type": ["string", "null"], "description": "What is wrong with that field."},
                   "budget": {"type": "string", "description": "409 over a quota: the budget it names; 429 over"
                                                                  " the user's submit rate: submit_rate."},
                   "held": {"type": "number", "description": "409 over a quota: what the user holds of it."},
                   "limit": {"type": "number", "description": "409 over a quota: its limit."},
                   "state_dir": {"type": "string", "description": "507: the state directory that is full."}},
}

OWN = {"JobSpec": JOB_SPEC, "Submitted": SUBMITTED, "Cancel": CANCEL, "Lease": LEASE, "Progress": PROGRESS}


def schemas() -> dict[str, dict]:
    """The document's schemas: the API's own, each registered resource's (``Resource.schemas``), the error."""
    return {**OWN, **registry.schemas(), "Error": ERROR}


SCHEMAS = schemas()


def _words_of(words) -> str:
    """A comma-separated list of ``words``, each maybe none and between spaces, as a pattern."""
    one = f"\\s*({'|'.join(words)})?\\s*"
    return f"^{one}(,{one})*$"


_NUMBER = "[0-9]+([.][0-9]+)?"
_DATE = "[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])([T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?)?"
# usage.TIME_FORMS: an age (90s, 2h, 1w), Unix seconds or a date (days 29 to 31 left out: not every month has them)
WHEN = f"^({_NUMBER} ?[smhdw]?|{_DATE})?$"  # empty: not given


# the query parameters whose text the server reads further than FastAPI's types: what they may be
PARAMETERS = {
    ("get", "/jobs"): {"status": {"type": "string", "maxLength": MAX_NAME, "pattern": _words_of(STATUSES),
                                  "description": "Statuses, comma-separated: " + ", ".join(STATUSES)},
                       "user": {"type": "string", "maxLength": MAX_NAME, "description": "Only this user's jobs."}},
    ("get", "/history"): {
        "state": {"type": "string", "maxLength": MAX_FILTER, "pattern": _words_of(STATE_WORDS),
                  "description": "States, comma-separated: a status, finished (the default), active or all."},
        "by": {"type": "string", "enum": ["", *GROUPINGS], "description": "Totals per user, GPU type or queue."},
        **{name: {"type": "string", "maxLength": MAX_FILTER, "pattern": WHEN,
                  "description": f"{said}: an age such as 90s, 30m, 2h, 3d or 1w (that long ago), Unix seconds, or a "
                                 "date 2026-11-27 (or a local time 2026-11-27T10:00)"}
           for name, said in (("since", "The start of the time the jobs overlap"), ("until", "Its end, after since"))},
    },
}

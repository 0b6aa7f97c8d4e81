"""The API's request bodies and answers as JSON Schema, for the OpenAPI document only.

The server checks every body by hand (``jobspec.py``, ``bodies.py``), so that an error names
the field; these schemas describe the same fields and bounds to a reader of ``/docs`` and to
generated clients, and check nothing. ``tests/serve/test_api_docs.py`` holds them to the job
file's fields.
"""

from __future__ import annotations

from apportion.serve.bounds import (
    MAX_AFTER, MAX_ARGS, MAX_ARRAY_TASKS, MAX_ARRAY_TEXT, MAX_ATTEMPT, MAX_COMMAND, MAX_CPUS, MAX_ENV, MAX_ENV_VALUE,
    MAX_GPU_TYPES, MAX_GPUS, MAX_HUNG_AFTER_S, MAX_MEMORY_GB,
    MAX_JOB_ID, MAX_NAME, MAX_PATH, MAX_PRIORITY, MAX_STEPS, MAX_URL, MAX_TIME_LIMIT_S, MIN_HUNG_AFTER_S,
)
from apportion.serve.privacy_spec import MAX_BLOCKS_ADDED, MAX_CLAIM_BLOCKS


def _text(description: str, most: int = MAX_NAME) -> dict:
    return {"type": "string", "maxLength": most, "description": description}


def _whole(description: str, least: int = 1, most: int = MAX_STEPS) -> dict:
    return {"type": "integer", "minimum": least, "maximum": most, "description": description}


JOB_SPEC = {
    "type": "object",
    "title": "JobSpec",
    "description": "A job, with the fields of a job file (docs/serve.md, \"Job files\"). A field that does not fit "
                   "is answered 400 with {detail, field, message} naming it; nothing is stored.",
    "required": ["name", "command"],
    "properties": {
        "name": _text("The job's name; also its throughput kind unless `kind` is given."),
        "command": {"description": f"A shell line, or a list of arguments (at most {MAX_ARGS:,}); at most "
                                   f"{MAX_COMMAND:,} characters in all.",
                    "anyOf": [{"type": "string", "maxLength": MAX_COMMAND},
                              {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_ARGS}]},
        "gpus": _whole("GPUs (or CPU slots) the job runs on; default 1.", most=MAX_GPUS),
        "gpu_types": {"type": "array", "items": {"type": "string", "maxLength": MAX_NAME}, "maxItems": MAX_GPU_TYPES,
                      "description": "The GPU types it may run on (v100, h100, cpu, ...); default any."},
        "total_steps": _whole("Steps it trains for; or give epochs and steps_per_epoch."),
        "epochs": _whole("With steps_per_epoch, instead of total_steps."),
        "steps_per_epoch": _whole("With epochs, instead of total_steps."),
        "priority": {"type": "number", "minimum": 0, "maximum": MAX_PRIORITY,
                     "description": "Its weight; default 1; 0 is best effort."},
        "queue": _text("Its queue; default \"\"."),
        "user": _text("Who submits it: on a server without credentials, required; with them, only an admin may "
                      "name another user than the credential's."),
        "checkpoint_dir": _text("Where its checkpoints go; default STATE_DIR/jobs/ID/checkpoints.", MAX_PATH),
        "env": {"type": "object", "maxProperties": MAX_ENV,
                "additionalProperties": {"type": "string", "maxLength": MAX_ENV_VALUE},
                "description": "Extra environment variables (names [A-Za-z_][A-Za-z0-9_]*; not APPORTION_* nor "
                               "CUDA_VISIBLE_DEVICES)."},
        "workdir": _text("Where the command runs (an absolute path on the server's machine).", MAX_PATH),
        "kind": _text("Its throughput kind; default its name."),
        "checkpoint_every": {"type": "string", "description": "Periodic checkpoints: auto, auto:SECONDS, off or "
                                                              "SECONDS; default the server's."},
        "model": _text("A preset of the perf model (gpt3-1.3b, ...), instead of kind: its speeds are predicted."),
        "global_batch": _whole("Sequences per step; required with model."),
        "layout": {"description": "With model: tp=2 pp=1 mb=4, as text or a mapping; default the best layout.",
                   "anyOf": [{"type": "string"}, {"type": "object"}]},
        "elastic": {"type": "object", "description": "An elastic job, sized by the scheduler each round: min_gpus, "
                                                     "max_gpus, batch_size, ... (docs/serve.md)."},
        "warm_start": {"type": "boolean", "description": "false: always start cold; default the server's setting."},
        "hung_after_s": {"type": "number", "minimum": MIN_HUNG_AFTER_S, "maximum": MAX_HUNG_AFTER_S,
                         "description": "Seconds of silence (no lease call, no progress report) before its attempt "
                                        "is hung; default the server's."},
        "time_limit": {"description": "Running time over all its attempts, then it fails: seconds, or text with a "
                                      "unit s, m, h or d (90m, 12h).",
                       "anyOf": [{"type": "number", "minimum": 1, "maximum": MAX_TIME_LIMIT_S}, {"type": "string"}]},
        "cpus": {"type": "integer", "minimum": 1, "maximum": MAX_CPUS,
                 "description": "CPU cores it needs at least, over all its GPUs; default the scheduler's split."},
        "memory_gb": {"type": "number", "minimum": 1 / 1024, "maximum": MAX_MEMORY_GB,
                      "description": "Host memory it needs, GiB; refused if no node has that much."},
        "after": {"type": "array", "maxItems": MAX_AFTER,
                  "items": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_JOB_ID}, {"type": "string"}]},
                  "description": "Ids of jobs that must complete before it starts (the submitting user's own)."},
        "array": {"description": f"A job array: one job per index, each with APPORTION_ARRAY_INDEX: a range "
                                f"(0-15), with a step (0-15:2), a list (1,3,5-7), or a list of indices; %N after it: "
                                f"at most N tasks under way at once. At most {MAX_ARRAY_TASKS:,} tasks.",
                  "anyOf": [{"type": "string", "maxLength": MAX_ARRAY_TEXT}, {"type": "integer", "minimum": 0},
                            {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": MAX_ARRAY_TASKS}]},
        "notify": {"type": "string", "maxLength": MAX_URL, "format": "uri",
                   "description": "An http(s) URL POSTed a JSON summary when the job ends; where it may point is the "
                                  "server's --notify-hosts."},
        "privacy": {"type": "object", "required": ["blocks"],
                    "description": "The privacy budget it claims of the server's blocks (docs/privacy.md): blocks, "
                                   "then epsilon and delta, or rdp {order: epsilon} at the blocks' orders; weight.",
                    "properties": {"blocks": {"type": "array", "items": {"type": "string", "maxLength": MAX_NAME},
                                              "minItems": 1, "maxItems": MAX_CLAIM_BLOCKS},
                                   "epsilon": {"type": "number", "minimum": 0}, "delta": {"type": "number", "minimum": 0},
                                   "rdp": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
                                   "weight": {"type": "number", "exclusiveMinimum": 0}}},
    },
}

BLOCKS = {
    "type": "object",
    "title": "Blocks",
    "description": "Privacy blocks to add, all or none; each arrives (its budget starts to unlock) now.",
    "required": ["blocks"],
    "properties": {"blocks": {"type": "array", "minItems": 1, "maxItems": MAX_BLOCKS_ADDED, "items": {
        "type": "object", "required": ["name", "epsilon", "delta"],
        "properties": {"name": _text("The block's name: one word, never used before on this server."),
                       "epsilon": {"type": "number", "exclusiveMinimum": 0, "description": "The ε its budget keeps."},
                       "delta": {"type": "number", "minimum": 0, "exclusiveMaximum": 1,
                                 "description": "The δ its budget keeps."},
                       "rdp_orders": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 1},
                                      "description": "Account in Rényi DP at these orders (every block the same)."}}}}},
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
    "properties": {"user": _text("Who asks, on a server without credentials; with them, the credential's user.")},
}

LEASE = {
    "type": "object",
    "title": "Lease",
    "description": "An attempt's lease call, with its own credential (APPORTION_TOKEN); docs/serve-contract.md.",
    "required": ["attempt"],
    "properties": {
        "attempt": _whole("The attempt's number (APPORTION_ATTEMPT).", least=0, most=MAX_ATTEMPT),
        "steps_done": _whole("Steps done so far.", least=0),
        "skipped_checkpoints": {"type": "array", "items": {"type": "string"},
                                "description": "Checkpoints its restore passed over: \"step-XXXXXXXX.pt: why\"."},
    },
}

PROGRESS = {
    "type": "object",
    "title": "Progress",
    "description": "An attempt's progress report, with its own credential; an elastic job adds what it"
                   " measured; a job that times its waits for data, its data stall.",
    "required": ["attempt", "steps_done"],
    "properties": {
        "attempt": _whole("The attempt's number.", least=0, most=MAX_ATTEMPT),
        "steps_done": _whole("Steps done so far.", least=0),
        "steps_per_s": {"type": "number", "minimum": 0, "description": "Its speed now."},
        "noise_scale": {"type": "number", "minimum": 0, "description": "Elastic: gradient noise scale, in examples."},
        "sync_s": {"type": "number", "minimum": 0, "description": "Elastic: seconds a step synchronises."},
        "micro_batch": {"type": "number", "minimum": 1, "description": "Elastic: examples per micro-batch."},
        "micro_batches": _whole("Elastic: micro-batches a step, per replica."),
        "nodes": _whole("Elastic: nodes it runs on.", most=MAX_GPUS),
        "examples_done": _whole("Elastic, with a target in examples: examples done so far.", least=0),
        "data_stall": {"type": "number", "minimum": 0, "maximum": 1,
                       "description": "The share of its step time spent waiting for data since its last report."},
        "fetch_stall": {"type": "number", "minimum": 0, "maximum": 1,
                        "description": "Of data_stall, the share fetching (I/O), where the job knows it."},
        "preprocess_stall": {"type": "number", "minimum": 0, "maximum": 1,
                             "description": "Of data_stall, the share pre-processing (CPU), where the job knows it."},
    },
}

ERROR = {
    "type": "object",
    "title": "Error",
    "properties": {"detail": {"type": "string", "description": "What is wrong, in one line."},
                   "field": {"type": ["string", "null"], "description": "The field it is about, if any."},
                   "message": {"type": ["string", "null"], "description": "What is wrong with that field."}},
}

SCHEMAS = {"JobSpec": JOB_SPEC, "Submitted": SUBMITTED, "Cancel": CANCEL, "Lease": LEASE, "Progress": PROGRESS,
           "Blocks": BLOCKS, "Error": ERROR}

"""A stand-in training job that follows docs/serve-contract.md with the standard library only.

It counts steps into a checksum, checkpoints to CHECKPOINT_DIR/step-XXXXXXXX.json, asks for
its lease near the lease's end, and exits 75 when told ``renew: false``. Knobs (environment):
STEP_S seconds a step, CRASH_ON_ATTEMPT/CRASH_AT crash with exit 3 at that step of that attempt
(``*``: every attempt), IGNORE_TERM ignore SIGTERM and the lease.
"""

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

JOB = os.environ.get("APPORTION_JOB_ID")
SERVER = os.environ.get("APPORTION_SERVER", "")
ATTEMPT = int(os.environ.get("APPORTION_ATTEMPT", "1"))
TOTAL = int(os.environ.get("APPORTION_TOTAL_STEPS") or (sys.argv[1] if len(sys.argv) > 1 else 20))
CKPT = os.environ.get("APPORTION_CHECKPOINT_DIR") or "."
STEP_S = float(os.environ.get("STEP_S", "0.02"))
CRASH_AT = int(os.environ.get("CRASH_AT", "-1"))
CRASH_ON = os.environ.get("CRASH_ON_ATTEMPT", "1")
IGNORE_TERM = os.environ.get("IGNORE_TERM") == "1"


def call(path, body):
    request = urllib.request.Request(f"{SERVER}/jobs/{JOB}/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    token = os.environ.get("APPORTION_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        if err.code == 409:
            print("stale attempt: exiting", flush=True)
            os._exit(1)
        raise


def load():
    files = sorted(f for f in os.listdir(CKPT) if f.startswith("step-") and f.endswith(".json")) if os.path.isdir(CKPT) else []
    if not files:
        return 0, 1
    with open(os.path.join(CKPT, files[-1])) as handle:
        data = json.load(handle)
    return data["step"], data["value"]


def save(step, value):
    os.makedirs(CKPT, exist_ok=True)
    path = os.path.join(CKPT, f"step-{step:08d}.json")
    with open(path + ".tmp", "w") as handle:
        json.dump({"step": step, "value": value}, handle)
    os.replace(path + ".tmp", path)


def main():
    step, value = load()
    print(f"attempt {ATTEMPT}: resuming at step {step}", flush=True)
    if IGNORE_TERM:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    lease_end = float(os.environ.get("APPORTION_LEASE_END", "inf"))
    last = time.time()
    while step < TOTAL:
        if JOB and not IGNORE_TERM and time.time() >= lease_end - 0.05:
            answer = call("lease", {"attempt": ATTEMPT, "steps_done": step})
            if not answer["renew"]:
                save(step, value)
                print(f"preempted at step {step}", flush=True)
                sys.exit(75)
            lease_end = answer["lease_end"]
        step += 1
        value = (value * 31 + step) % 1_000_003
        time.sleep(STEP_S)
        if step == CRASH_AT and CRASH_ON in ("*", str(ATTEMPT)):
            print(f"boom at step {step}", flush=True)
            sys.exit(3)
        if JOB and step % 5 == 0:
            now = time.time()
            call("progress", {"attempt": ATTEMPT, "steps_done": step, "steps_per_s": 5 / max(now - last, 1e-6)})
            last = now
    save(step, value)
    if JOB:
        call("progress", {"attempt": ATTEMPT, "steps_done": step})
    print(f"final_checksum={value}", flush=True)


if __name__ == "__main__":
    main()

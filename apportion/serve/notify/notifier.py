"""Job notifications: a job file's ``notify:`` URL is POSTed a JSON summary when the job ends.

The state file says which jobs are still to be told (``notify_pending``, set at submit): a
poller finds those that ended, with no attempt alive any more, and puts them in a bounded
queue; a few sender threads POST them (notify_send.py), each try within ``timeout_s``,
retrying a receiver that does not answer, answers 5xx, 408 or 429, after ``backoff_s``, then
twice that. Neither waits on a round or a request beyond reading and marking a few rows, and
a full queue only leaves jobs pending for the next poll. The outcome is an event on the job
(``notify``: "delivered", or ``notify-failed``: "not delivered", as the dashboard shows a job's
events) and a line in the server's log with the detail (what the receiver answered, or why it
was not tried). The event never says what a receiver answered or why it could not be reached:
the submitter chose the URL, and would otherwise learn which internal hosts and ports answer (a
port scanner). A job is never changed by its notification. A notification not finished when
the server stops is sent by the next one.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Callable

from apportion.core.errors import InputError
from apportion.serve.jobs.notify_hosts import NotifyHosts, notify_target
from apportion.serve.notify.send import NotSent, post_json
from apportion.serve.jobs.records import JobRecord
from apportion.serve.store.state import StateStore

RETRIED_STATUSES = (408, 429)  # besides 5xx: the receiver asks to be tried again
SAID_TO_SUBMITTER = {"notify": "delivered", "notify-failed": "not delivered (the server's log says why)"}


def notification(row: JobRecord, server_url: str) -> dict:
    """What a job's notify URL is sent: the job as it ended, and where to see it on the server."""
    return {
        "id": str(row.id), "name": row.name, "user": row.user, "queue": row.queue, "status": row.status,
        "exit_code": row.exit_code, "reason": row.reason, "steps_done": row.steps_done,
        "total_steps": row.total_steps, "submitted": row.submitted, "started": row.started,
        "finished": row.finished, "url": f"{server_url}/jobs/{row.id}",
    }


class Notifier:
    """Sends the notifications of ended jobs from background threads; ``start`` them, set ``stop`` to end."""

    def __init__(self, store: StateStore, lock: threading.RLock, hosts: NotifyHosts, server_url: str, *,
                 log: Callable[[str], None] = lambda message: None, clock: Callable[[], float] = time.time,
                 timeout_s: float = 5.0, tries: int = 3, backoff_s: float = 1.0, senders: int = 2,
                 queue_size: int = 64, poll_s: float = 1.0) -> None:
        self.store, self.lock, self.hosts, self.server_url = store, lock, hosts, server_url
        self.log, self.clock = log, clock
        self.timeout_s, self.tries, self.backoff_s, self.senders, self.poll_s = (
            timeout_s, tries, backoff_s, senders, poll_s)
        self.queue: queue.Queue[tuple[int, str, bytes]] = queue.Queue(maxsize=queue_size)
        self._in_flight: set[int] = set()  # queued, being sent, or sent and not yet recorded: not queued again
        self._unrecorded: dict[int, tuple[str, str]] = {}  # outcomes the state file refused (full): never sent twice
        self._guard = threading.Lock()

    def start(self, stop: threading.Event) -> None:
        """The poller and the sender threads (daemons: a stuck receiver never holds the process)."""
        threading.Thread(target=self._poll, args=(stop,), name="apportion-notify-poll", daemon=True).start()
        for i in range(self.senders):
            threading.Thread(target=self._send, args=(stop,), name=f"apportion-notify-{i}", daemon=True).start()

    def queue_due(self) -> int:
        """Queue the ended jobs still to be told, as many as the queue has room for; how many were queued."""
        self._record()
        room = self.queue.maxsize - self.queue.qsize()
        if room <= 0:
            return 0
        with self._guard:
            skip = len(self._in_flight)
        with self.lock:
            due = self.store.notifications_due(room + skip)
        queued = 0
        for row in due:
            with self._guard:
                if row.id in self._in_flight:
                    continue
                self._in_flight.add(row.id)
            body = json.dumps(notification(row, self.server_url)).encode()
            try:
                self.queue.put_nowait((row.id, row.spec.get("notify") or "", body))
            except queue.Full:
                with self._guard:
                    self._in_flight.discard(row.id)
                break
            queued += 1
        return queued

    def send_one(self, job_id: int, url: str, body: bytes,
                 stop: threading.Event | None = None) -> tuple[str, str] | None:
        """POST one notification, retrying as the module says: (event, detail), the detail for the
        server's log (the job's event says only SAID_TO_SUBMITTER[event]); None when ``stop`` was set before it was done (it stays due, for the next server)."""
        try:
            target = notify_target(url, f"job {job_id}")
        except InputError as err:  # stored by an apportion that checked less
            return "notify-failed", err.message
        refusal = self.hosts.refusal(target)
        if refusal is not None:
            return "notify-failed", f"{target.host_header}: not sent: {refusal}"
        said = ""
        for attempt in range(1, self.tries + 1):
            if attempt > 1 and (stop or threading.Event()).wait(self.backoff_s * 2 ** (attempt - 2)):
                return None
            try:
                status = post_json(target, body, self.hosts, self.timeout_s)
            except NotSent as err:
                if err.refused:
                    return "notify-failed", f"{target.host_header}: not sent: {err}"
                said = str(err)
                continue
            if 200 <= status < 300:
                retried = f" (try {attempt})" if attempt > 1 else ""
                return "notify", f"{target.host_header} answered {status}{retried}"
            said = f"{target.host_header} answered {status}"
            if not (status >= 500 or status in RETRIED_STATUSES):
                note = " (redirects are not followed)" if 300 <= status < 400 else ""
                return "notify-failed", f"{said}{note}; not retried"
        return "notify-failed", f"{said}; gave up after {self.tries} tries"

    def _poll(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.queue_due()
            except Exception as err:  # a notification is never worth the server: said, and tried again
                self.log(f"notifications: {type(err).__name__}: {err}")
            stop.wait(self.poll_s)

    def _send(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                job_id, url, body = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            outcome = None
            try:
                outcome = self.send_one(job_id, url, body, stop)
            except Exception as err:  # never the end of a sender: it stays due, and is tried again
                self.log(f"job {job_id} notification: {type(err).__name__}: {err}")
            if outcome is None:
                with self._guard:
                    self._in_flight.discard(job_id)
                continue
            event, detail = outcome
            self.log(f"job {job_id} notification: {detail}" if event == "notify"
                     else f"job {job_id} notification failed: {detail}")
            with self._guard:
                self._unrecorded[job_id] = outcome
            if not self._record():
                self.log(f"job {job_id} notification: not recorded yet (the state file refused it); kept to record")

    def _record(self) -> bool:
        """Write the outcomes not yet in the state file, each as its job's event; False when one was refused."""
        with self._guard:
            outcomes = dict(self._unrecorded)
        for job_id, (event, _detail) in outcomes.items():
            try:
                with self.lock:
                    self.store.notified(job_id, self.clock(), event, SAID_TO_SUBMITTER[event])
            except Exception:  # a full state directory: kept, and written by a later poll
                return False
            with self._guard:
                self._unrecorded.pop(job_id, None)
                self._in_flight.discard(job_id)
        return True

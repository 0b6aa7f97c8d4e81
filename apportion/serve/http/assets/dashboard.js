// apportion's dashboard: polls /dashboard/state (and the selected job) and draws them.
// Plain DOM and plotly.js; every text from the server goes in as text, never as markup. plotly.js
// loads in parallel: the tables show at once, the charts from the first refresh after it has come.
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const every = Math.max(250, Number(new URLSearchParams(location.search).get("every")) || 2000);
  const config = { responsive: true, displaylogo: false };
  const TERMINAL = new Set(["completed", "failed", "cancelled"]);
  let token = sessionStorage.getItem("apportion.token") || "";
  let asUser = sessionStorage.getItem("apportion.user") || "";
  let selected = null; // the id of the job shown in detail
  let latest = null; // the last state read
  let timer = null;

  class HttpError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  function headers(extra) {
    const all = Object.assign({}, extra || {});
    if (token) all.Authorization = "Bearer " + token;
    return all;
  }

  async function read(path) {
    const answer = await fetch(path, { headers: headers(), cache: "no-store" });
    const body = await answer.json().catch(() => ({}));
    if (!answer.ok) throw new HttpError(answer.status, body.detail || answer.statusText);
    return body;
  }

  // el("td", {class: "x", dataset: {job: "1"}}, "text", child, ...)
  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "style") Object.assign(node.style, value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function say(text, isError) {
    const message = $("message");
    message.textContent = text;
    message.classList.toggle("error", Boolean(isError));
    message.hidden = !text;
  }

  function jobColor(id) {
    return `hsl(${(Number(id) * 137.508) % 360}, 50%, 42%)`;
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    const s = Math.max(0, seconds);
    if (s < 60) return `${s.toFixed(0)} s`;
    if (s < 3600) return `${(s / 60).toFixed(1)} min`;
    if (s < 86400) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} d`;
  }

  // The page's one clock format: 24-hour local time, with the date in front when it is not today.
  const pad = (n) => String(n).padStart(2, "0");

  function clock(seconds) {
    if (!seconds) return "—";
    const when = new Date(seconds * 1000), today = new Date();
    const time = `${pad(when.getHours())}:${pad(when.getMinutes())}:${pad(when.getSeconds())}`;
    if (when.toDateString() === today.toDateString()) return time;
    return `${when.getFullYear()}-${pad(when.getMonth() + 1)}-${pad(when.getDate())} ${time}`;
  }

  // the same format on a chart's time axis: its ticks, and the time a hover shows
  function timeAxis(times) {
    const today = new Date().toDateString();
    const allToday = times.every((t) => t === null || new Date(t * 1000).toDateString() === today);
    const day = allToday ? "" : "%Y-%m-%d ";
    return { type: "date", hoverformat: `${day}%H:%M:%S`, tickformatstops: [
      { dtickrange: [null, 1000], value: `${day}%H:%M:%S.%L` },
      { dtickrange: [1000, 60000], value: `${day}%H:%M:%S` },
      { dtickrange: [60000, 86400000], value: `${day}%H:%M` },
      { dtickrange: [86400000, null], value: "%Y-%m-%d" },
    ] };
  }

  // when a job ended, or for an active one when it is expected to (≥: it is not running, it may wait first)
  function finishCell(job) {
    if (TERMINAL.has(job.status)) return clock(job.finished);
    if (job.estimated_finish === null || job.estimated_finish === undefined) return "—";
    return el("span", { class: "estimate", title: "estimated from the jobs that finished on this server" },
      (job.status === "running" ? "~" : "≥") + clock(job.estimated_finish));
  }

  // the server line and who is reading -------------------------------------------------------

  function drawServer(state) {
    const server = state.server, counts = server.counts;
    $("server-line").textContent =
      `${server.server} · policy ${server.policy} · round ${server.round} (every ${server.round_s} s, next decided in ` +
      `${Math.round(server.next_round_in_s)} s) · ${counts.running} running, ${counts.queued + counts.preempted} ` +
      `waiting, ${counts.completed} completed, ${counts.failed} failed, ${counts.cancelled} cancelled` +
      (server.hangs ? ` · ${server.hangs} hung attempt(s) stopped` : "");
    const full = server.out_of_space;  // the state directory is full: writes are refused (507)
    $("space").hidden = !full;
    $("space").textContent = full
      ? `The state directory ${full.state_dir} is out of space since ${clock(full.since)}` +
        ` (${full.free_bytes === null ? "free space unknown" : `${full.free_bytes} bytes free`}): submissions and` +
        " cancels are refused and jobs that end are recorded once there is space again." : "";
    const viewer = state.viewer;
    let who;
    if (!viewer.credentials) who = "open server: no credentials";
    else if (viewer.anonymous) who = "reading without a credential (this machine)";
    else who = `you are ${viewer.user}${viewer.admin ? " (admin)" : ""}`;
    $("viewer").textContent = who;
    $("as-user").hidden = viewer.credentials;
    $("token").hidden = !viewer.credentials;
  }

  // the cluster: each GPU type, its slots, the job(s) on each ------------------------------------

  function drawCluster(state) {
    const names = new Map(state.jobs.map((job) => [job.id, job.name]));
    const box = $("cluster");
    box.replaceChildren();
    for (const type of state.gpu_types) {
      const slots = el("div", { class: "slots" });
      for (const slot of state.slots.filter((s) => s.gpu_type === type.name)) {
        const jobs = el("div", { class: "slot-jobs" });
        for (const id of slot.jobs) {
          jobs.append(el("button", { type: "button", class: "chip", dataset: { job: id }, style: { background: jobColor(id) },
            title: `job ${id}: ${names.get(id) || ""}` }, `${id} ${names.get(id) || ""}`));
        }
        if (!slot.jobs.length) jobs.append(slot.offline ? "offline" : "idle");
        const shown = slot.id + (slot.jobs.length > 1 ? " · shared" : "") + (slot.node ? ` · ${slot.node}` : "");
        slots.append(el("div", { class: slot.jobs.length ? "slot" : slot.offline ? "slot idle offline" : "slot idle",
          dataset: { slot: slot.id }, title: slot.offline ? "its node is gone: no job is placed here" : "" },
          el("div", { class: "slot-id" }, shown), jobs));
      }
      box.append(el("div", { class: "gpu-type", dataset: { gpuType: type.name } },
        el("h3", {}, type.name, el("span", { class: "busy" }, `${type.busy}/${type.slots} busy`)), slots));
    }
  }

  // the jobs table -------------------------------------------------------------------------------

  function progressBar(job) {
    const fraction = job.total_steps ? Math.min(1, job.steps_done / job.total_steps) : 0;
    return el("div", {},
      el("div", { class: "bar", title: `${job.steps_done} of ${job.total_steps} steps` },
        el("span", { style: { width: `${(fraction * 100).toFixed(1)}%` } })),
      el("div", { class: "bar-label" }, `${job.steps_done.toLocaleString()}/${job.total_steps.toLocaleString()} ` +
        `(${(fraction * 100).toFixed(0)}%)`));
  }

  // the share of its step time a job spent waiting for data, and its parts where the job knows them
  function stallText(job) {
    if (job.data_stall === null || job.data_stall === undefined) return "—";
    const percent = (share) => `${Math.round(share * 100)}%`;
    const parts = job.fetch_stall === null || job.fetch_stall === undefined ? ""
      : ` (fetch ${percent(job.fetch_stall)}, pre-processing ${percent(job.preprocess_stall)})`;
    return percent(job.data_stall) + parts;
  }

  function stallCell(job) {
    const text = stallText(job);
    return el("span", { class: "stall", title: text === "—" ? "the job does not time its waits for data"
      : `waiting for data: ${text} of its step time, as of its latest progress report` }, text.split(" ")[0]);
  }

  function drawJobs(state) {
    const active = state.jobs.filter((j) => !TERMINAL.has(j.status));
    const ended = state.jobs.filter((j) => TERMINAL.has(j.status)).sort((a, b) => (b.finished || 0) - (a.finished || 0));
    const body = $("jobs").tBodies[0];
    body.replaceChildren();
    for (const job of active.concat(ended)) {
      const on = job.slots.length ? job.slots.join(",") + (job.partner ? ` with ${job.partner}` : "") : "";
      body.append(el("tr", { dataset: { job: job.id, status: job.status }, class: job.id === selected ? "selected" : "" },
        el("td", {}, job.id),
        el("td", {}, job.name),
        el("td", {}, job.user),
        el("td", {}, job.queue),
        el("td", {}, el("span", { class: `status ${job.status}` }, job.status)),
        el("td", { class: "reason" }, job.reason),
        el("td", {}, job.gpus),
        el("td", {}, on),
        el("td", {}, progressBar(job)),
        el("td", {}, stallCell(job)),
        el("td", { class: "time" }, clock(job.submitted)),
        el("td", {}, duration(job.runtime_s)),
        el("td", { class: "time finish" }, finishCell(job)),
        el("td", {}, job.preemptions),
        el("td", {}, job.may_cancel ? el("button", { type: "button", class: "cancel", dataset: { cancel: job.id } }, "Cancel") : "")));
    }
    const hidden = state.finished_not_shown, waiting = state.waiting_not_shown || 0;
    $("jobs-note").textContent = (state.jobs.length ? "" : "No jobs yet: apportion submit JOB.yaml. ") +
      (waiting ? `And ${waiting.toLocaleString("en-US")} more waiting (apportion queue --all lists them). ` : "") +
      (hidden ? `${hidden.toLocaleString("en-US")} older finished job(s) not shown (apportion queue lists them all).` : "");
  }

  function drawPrivacy(state) {
    const privacy = state.privacy, body = $("privacy").tBodies[0];
    $("privacy-section").hidden = !privacy.blocks.length;
    $("privacy-title").textContent = `Privacy budget (${privacy.policy})`;
    const amount = (value) => Number(value.toPrecision(4)).toString();
    body.replaceChildren();
    for (const block of privacy.blocks) {
      body.append(el("tr", { dataset: { block: block.name } },
        el("td", {}, block.name),
        el("td", {}, amount(block.epsilon)),
        el("td", {}, block.delta.toString()),
        el("td", {}, amount(block.unlocked)),
        el("td", {}, amount(block.granted)),
        el("td", {}, amount(block.consumed)),
        el("td", {}, amount(block.left) + (block.order === null ? "" : ` @${block.order}`)),
        el("td", {}, block.claims),
        el("td", {}, block.waiting)));
    }
  }

  // the cluster over time --------------------------------------------------------------------------

  function drawLoad(state) {
    if (typeof Plotly === "undefined") return;
    const history = state.history, when = history.t.map((t) => new Date(t * 1000));
    const traces = state.gpu_types.map((type) => ({
      type: "scatter", mode: "lines", name: `${type.name} busy (%)`, x: when, line: { shape: "hv", width: 1.5 },
      y: history.busy[type.name].map((busy) => (busy === null ? null : (100 * busy) / Math.max(type.slots, 1))),
      hovertemplate: `${type.name}: %{y:.0f}% busy<extra></extra>`,
    }));
    traces.push({ type: "scatter", mode: "lines", name: "waiting jobs", x: when, y: history.queued, yaxis: "y2",
      line: { shape: "hv", width: 1.5, dash: "dot", color: "#555" }, hovertemplate: "%{y} waiting<extra></extra>" });
    traces.push({ type: "scatter", mode: "lines", name: "running jobs", x: when, y: history.running, yaxis: "y2",
      line: { shape: "hv", width: 1, dash: "dash", color: "#999" }, hovertemplate: "%{y} running<extra></extra>" });
    const most = Math.max(1, ...history.queued, ...history.running);
    Plotly.react("load-chart", traces, {
      height: 260, margin: { l: 50, r: 50, t: 10, b: 40 }, hovermode: "x unified",
      legend: { orientation: "h", y: -0.2 }, xaxis: timeAxis(history.t),
      yaxis: { title: { text: "busy (%)" }, range: [0, 105] },
      yaxis2: { title: { text: "jobs" }, overlaying: "y", side: "right", range: [0, most * 1.1], tick0: 0,
        dtick: Math.max(1, Math.ceil(most / 5)), showgrid: false },
    }, config);
  }

  // one job in detail ---------------------------------------------------------------------------

  function drawDetail(detail) {
    const job = detail.job;
    $("detail").hidden = false;
    $("detail-title").textContent = `Job ${job.id}: ${job.name}`;
    $("detail-cancel").hidden = !job.may_cancel;
    $("detail-cancel").dataset.cancel = job.id;
    const fields = [
      ["status", job.status], ["user", job.user], ["queue", job.queue], ["kind", job.kind], ["GPUs", job.gpus],
      ["on", job.slots.join(",") || "—"], ["steps", `${job.steps_done}/${job.total_steps}`],
      ["waiting for data", stallText(job)],
      ["attempts", job.attempts], ["preemptions", job.preemptions], ["retries", job.retries],
      ["hangs", job.hangs],
      ["submitted", clock(job.submitted)], ["started", clock(job.started)],
      [TERMINAL.has(job.status) ? "finished" : "estimated finish", finishCell(job)],
      ["runtime", duration(job.runtime_s)], ["reason", job.reason || "—"],
    ];
    $("detail-fields").replaceChildren(...fields.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
    $("events").replaceChildren(...detail.events.map((e) =>
      el("li", { class: e.event, dataset: { event: e.event } },
        el("time", { datetime: new Date(e.time * 1000).toISOString() }, clock(e.time)), `${e.event}: ${e.detail}`)));
    $("log-title").textContent = detail.log.attempt ? `Log (attempt ${detail.log.attempt}, last lines)` : "Log";
    const log = $("log"), text = detail.log.shown ? (detail.log.text || "(empty)") : detail.log.why;
    if (log.textContent !== text) {
      const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.textContent = text;
      if (atEnd || !log.dataset.job || log.dataset.job !== job.id) log.scrollTop = log.scrollHeight; // follow the end
      log.dataset.job = job.id;
    }
    drawThroughput(detail);
  }

  // The reported rates as a line that runs only while an attempt does: from its start (at its
  // first rate) to its exit (at its last), broken in between. A rate holds back to the point before.
  function throughputLine(progress, events) {
    const points = progress.t.map((t, i) => ({ t: t, kind: "report", rate: progress.steps_per_s[i] }));
    for (const e of events) {
      if (e.event === "start" || e.event === "exit") points.push({ t: e.time, kind: e.event });
    }
    points.sort((a, b) => a.t - b.t);
    const x = [], y = [];
    let last = null;
    points.forEach((point, i) => {
      if (point.kind === "report") {
        x.push(point.t); y.push(point.rate); last = point.rate;
      } else if (point.kind === "start") {
        const next = points[i + 1];
        last = null;
        if (next && next.kind === "report") { x.push(point.t); y.push(next.rate); }
      } else {
        if (last !== null) { x.push(point.t); y.push(last); }
        x.push(point.t); y.push(null);
        last = null;
      }
    });
    return { x: x.map((t) => new Date(t * 1000)), y: y };
  }

  function drawThroughput(detail) {
    if (typeof Plotly === "undefined") return;
    const progress = detail.progress, line = throughputLine(progress, detail.events);
    const marks = detail.events.filter((e) => ["start", "preempt", "move", "exit", "cancel", "fail", "retry"].includes(e.event));
    const colors = { start: "#2ca02c", preempt: "#d62728", move: "#ff7f0e", exit: "#7f7f7f", cancel: "#111",
      fail: "#8c1d18", retry: "#9467bd" };
    const traces = [{ type: "scatter", mode: "lines", name: "steps/s", x: line.x, y: line.y,
      line: { shape: "vh", color: "#4c72b0" }, connectgaps: false,
      hovertemplate: "%{y:.3g} steps/s<extra></extra>" }];
    traces.push({ type: "scatter", mode: "markers", name: "events", x: marks.map((e) => new Date(e.time * 1000)),
      y: marks.map(() => 0), text: marks.map((e) => `${e.event}: ${e.detail}`), hovertemplate: "%{text}<extra></extra>",
      marker: { symbol: "triangle-up", size: 10, color: marks.map((e) => colors[e.event]) } });
    const shapes = marks.map((e) => ({ type: "line", xref: "x", yref: "paper", x0: new Date(e.time * 1000),
      x1: new Date(e.time * 1000), y0: 0, y1: 1, line: { color: colors[e.event], width: 1, dash: "dot" } }));
    Plotly.react("throughput-chart", traces, {
      height: 240, margin: { l: 50, r: 20, t: 10, b: 40 }, showlegend: false, hovermode: "closest",
      xaxis: timeAxis(progress.t.concat(marks.map((e) => e.time))), yaxis: { title: { text: "steps/s" }, rangemode: "tozero" },
      shapes: shapes,
    }, config);
    $("throughput-note").textContent = progress.t.length ? "" :
      "No progress reports yet (since this server started): the line fills in as the job reports.";
  }

  // polling ------------------------------------------------------------------------------------

  async function refresh() {
    clearTimeout(timer);
    try {
      const state = await read("/dashboard/state");
      latest = state;
      drawServer(state);
      drawCluster(state);
      drawJobs(state);
      drawPrivacy(state);
      drawLoad(state);
      if (selected !== null) {
        try {
          drawDetail(await read(`/dashboard/jobs/${encodeURIComponent(selected)}`));
        } catch (error) {
          if (!(error instanceof HttpError && error.status === 404)) throw error;
          selected = null;
          $("detail").hidden = true;
        }
      }
      if ($("message").dataset.kind === "unreachable") {
        say("");
        delete $("message").dataset.kind;
      }
      document.body.dataset.updated = String(Date.now());
    } catch (error) {
      const why = error instanceof HttpError && error.status === 401
        ? `this server asks for a credential: ${error.message}` : `cannot read the server: ${error.message}`;
      say(why, true);
      $("message").dataset.kind = "unreachable";
    } finally {
      timer = setTimeout(refresh, every);
    }
  }

  async function cancel(id) {
    if (!window.confirm(`Cancel job ${id}?`)) return;
    const body = latest && !latest.viewer.credentials ? { user: asUser } : {};
    try {
      const answer = await fetch(`/jobs/${encodeURIComponent(id)}/cancel`, {
        method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body),
      });
      const reply = await answer.json().catch(() => ({}));
      if (answer.ok) {
        say(`Job ${id} cancelled.`);
      } else {
        const hint = answer.status === 401 ? " Give your credential above (apportion users add NAME)." : "";
        say(`Cancel of job ${id} refused (${answer.status}): ${reply.detail || answer.statusText}.${hint}`, true);
      }
    } catch (error) {
      say(`Cancel of job ${id} failed: ${error.message}`, true);
    }
    refresh();
  }

  function select(id) {
    selected = id;
    for (const row of $("jobs").tBodies[0].rows) row.classList.toggle("selected", row.dataset.job === id);
    refresh().then(() => $("detail").scrollIntoView({ behavior: "smooth", block: "nearest" }));
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("[data-cancel]");
    if (button) {
      event.stopPropagation();
      cancel(button.dataset.cancel);
      return;
    }
    const chosen = event.target.closest("[data-job]");
    if (chosen) select(chosen.dataset.job);
  });
  $("detail-close").addEventListener("click", () => {
    selected = null;
    $("detail").hidden = true;
  });
  $("credential").addEventListener("submit", (event) => {
    event.preventDefault();
    token = $("token").value.trim();
    asUser = $("as-user").value.trim();
    sessionStorage.setItem("apportion.token", token);
    sessionStorage.setItem("apportion.user", asUser);
    say(token || asUser ? "Using it for this tab (until it closes or you forget it)." : "");
    refresh();
  });
  $("credential-forget").addEventListener("click", () => {
    token = asUser = "";
    $("token").value = $("as-user").value = "";
    sessionStorage.removeItem("apportion.token");
    sessionStorage.removeItem("apportion.user");
    say("Forgotten.");
    refresh();
  });
  $("token").value = token;
  $("as-user").value = asUser;
  refresh();
})();

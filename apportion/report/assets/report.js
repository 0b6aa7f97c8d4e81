// Unpack plotly.js and the figures (gzip + base64 in the page), then draw every chart.
(function () {
  "use strict";
  const status = document.getElementById("status");
  const config = { responsive: true, displaylogo: false };

  async function unpack(id) {
    const text = document.getElementById(id).textContent.trim();
    const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return await new Response(stream).text();
  }

  function webgl() {
    try {
      const canvas = document.createElement("canvas");
      return Boolean(canvas.getContext("webgl2") || canvas.getContext("webgl"));
    } catch (error) {
      return false;
    }
  }

  // Segments [x0, x1] on row y as one polyline broken by gaps: x0, x1, null, x0, x1, null, ...
  function polyline(x0, x1, y0, y1, text) {
    const n = x0.length, x = new Array(3 * n), y = new Array(3 * n);
    const labels = text ? new Array(3 * n) : undefined;
    for (let i = 0; i < n; i++) {
      x[3 * i] = x0[i]; x[3 * i + 1] = x1[i]; x[3 * i + 2] = null;
      y[3 * i] = y0[i]; y[3 * i + 1] = y1[i]; y[3 * i + 2] = null;
      if (labels) { labels[3 * i] = labels[3 * i + 1] = text[i]; }
    }
    return { x: x, y: y, text: labels };
  }

  function ganttTraces(gantt, type) {
    const traces = [];
    for (const bar of gantt.bars) {
      const line = polyline(bar.start, bar.end, bar.row, bar.row, bar.text);
      traces.push(Object.assign(line, { type: type, mode: "lines", name: bar.name, legendgroup: bar.name,
        line: { color: bar.color, width: bar.width }, hovertemplate: bar.hover }));
    }
    for (const mark of gantt.marks) {
      const low = mark.row.map((r) => r - mark.half), high = mark.row.map((r) => r + mark.half);
      const line = polyline(mark.time, mark.time, low, high);
      traces.push(Object.assign(line, { type: type, mode: "lines", name: mark.name,
        visible: mark.shown ? true : "legendonly", line: { color: mark.color, width: 1 }, hovertemplate: mark.hover }));
    }
    return traces;
  }

  function draw(report) {
    for (const [id, figure] of Object.entries(report.figures)) {
      Plotly.newPlot(id, figure.data, figure.layout, config);
    }
    const element = document.getElementById("gantt");
    const choice = document.getElementById("gantt-policy");
    const type = webgl() ? "scattergl" : "scatter";
    const note = document.getElementById("gantt-note");
    const show = (index) => {
      const chart = report.gantt[index];
      note.textContent = chart ? chart.note : "";
      Plotly.purge(element);
      if (chart && chart.figure) {
        Plotly.newPlot(element, ganttTraces(chart.figure, type), chart.figure.layout, config);
      }
    };
    show(0);
    if (choice) choice.addEventListener("change", () => show(Number(choice.value)));
  }

  (async function () {
    try {
      if (typeof DecompressionStream === "undefined") {
        throw new Error("this browser cannot unpack them (it has no DecompressionStream; any browser from 2023 on has)");
      }
      const [plotly, data] = await Promise.all([unpack("plotly-js"), unpack("report-data")]);
      const script = document.createElement("script");
      script.textContent = plotly;
      document.head.appendChild(script);
      draw(JSON.parse(data));
      status.hidden = true;
      document.body.dataset.drawn = "true";
    } catch (error) {
      status.textContent = "The charts could not be drawn: " + error.message;
      status.classList.add("error");
      console.error(error);
    }
  })();
})();

// radeonlab dashboard: renders what the server streams (/events); the chart is plotly.js, served by the
// package (no CDN). No state lives here that the server does not have: a reload shows the same page.
"use strict";

const settings = JSON.parse(document.getElementById("settings").textContent);
let selected = (location.hash.match(/job=([a-z0-9-]+)/) || [])[1] || null;
let source = null;
let chartJob = null;
let chartGeneration = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return node;
}

function fmtAge(s) {
  if (s == null) return "";
  if (s < 120) return Math.round(s) + "s";
  if (s < 7200) return Math.round(s / 60) + "m";
  return (s / 3600).toFixed(1) + "h";
}

function gpuText(g) {
  const parts = [`GPU ${g.index}${g.name ? " " + g.name : ""}`];
  parts.push(`VRAM ${g.vram_text}`);  // written by the server (radeonlab/units.py), as the CLI writes it
  if (g.temp_c != null) parts.push(`${g.temp_c.toFixed(0)} °C`);
  if (g.busy_percent != null) parts.push(`${g.busy_percent.toFixed(0)}% busy`);
  if (g.power_w != null) parts.push(`${g.power_w.toFixed(0)} W`);
  return parts.join(", ");
}

function renderHosts(hosts) {
  const body = document.querySelector("#hosts tbody");
  body.replaceChildren(...hosts.map((h) => el("tr", { "data-host": h.host, "data-reachable": String(h.reachable) },
    el("td", {}, h.host),
    el("td", { class: h.reachable ? "good" : "bad" }, h.reachable ? "yes" : "unreachable: " + (h.error || "")),
    el("td", { class: h.provisioned ? "good" : "warn" }, h.provisioned ? "yes" : (h.note || "no")),
    el("td", {}, ...h.gpus.map((g) => el("div", {}, gpuText(g)))),
    el("td", {}, h.running.join(", ")),
    el("td", {}, h.queued.join(", ")),
  )));
}

function cancelButton(job) {
  if (!settings.allowCancel || !job.alive) return "";
  const button = el("button", { type: "button", className: "cancel", "data-cancel": job.id }, "cancel");
  button.addEventListener("click", async (event) => {
    event.stopPropagation();
    if (!confirm(`Cancel ${job.id}?`)) return;
    const r = await fetch(`/api/jobs/${job.id}/cancel`, { method: "POST", headers: { "X-Radeonlab-Token": settings.token } });
    const answer = await r.json();
    button.replaceWith(el("span", { class: r.ok ? "warn" : "bad" }, r.ok ? answer.state : answer.error));
  });
  return button;
}

function renderJobs(jobs) {
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren(...jobs.map((j) => {
    const row = el("tr", { "data-job": j.id, "data-state": j.state, class: j.id === selected ? "selected" : "" },
      el("td", {}, el("a", { href: `#job=${j.id}` }, j.id)),
      el("td", {}, j.host),
      el("td", { class: j.state === "failed" ? "bad" : j.state === "succeeded" ? "good" : "" }, j.state),
      el("td", {}, fmtAge(j.age_s)),
      el("td", {}, j.step == null ? "" : `${j.step}/${j.total_steps ?? "?"}`),
      el("td", {}, j.last_loss == null ? "" : j.last_loss.toFixed(4)),
      el("td", {}, cancelButton(j)),
    );
    return row;
  }));
}

const LAYOUT = {
  margin: { l: 60, r: 20, t: 10, b: 40 },
  showlegend: true,
  legend: { orientation: "h", y: 1.06 },
  xaxis: { title: { text: "step" }, anchor: "y3" },
  yaxis: { title: { text: "loss" }, domain: [0.46, 1] },
  yaxis2: { title: { text: "lr" }, domain: [0.24, 0.42], exponentformat: "e" },
  yaxis3: { title: { text: "tokens/s" }, domain: [0, 0.2] },
};

function traces(d) {
  return [
    { name: "loss", x: d.steps, y: d.loss, mode: "lines+markers", marker: { size: 3 }, yaxis: "y" },
    { name: "learning rate", x: d.steps, y: d.lr, mode: "lines", yaxis: "y2" },
    { name: "tokens/s", x: d.steps, y: d.tokens_per_s, mode: "lines", yaxis: "y3" },
  ];
}

function renderChart(d) {
  const chart = document.getElementById("chart");
  if (chartJob !== d.id || chartGeneration !== d.generation || d.since === 0) {
    chartJob = d.id;
    chartGeneration = d.generation;
    Plotly.react(chart, traces(d), { ...LAYOUT }, { responsive: true, displaylogo: false });
  } else if (d.steps.length) {
    Plotly.extendTraces(chart, { x: [d.steps, d.steps, d.steps], y: [d.loss, d.lr, d.tokens_per_s] }, [0, 1, 2]);
  }
  chart.setAttribute("data-points", String(chart.data[0].x.length));
}

function renderJob(d) {
  document.getElementById("job").hidden = false;
  document.getElementById("job-title").textContent = `${d.id} on ${d.host}`;
  const eff = d.effective_tokens_per_s ? `, effective ${d.effective_tokens_per_s.toFixed(0)} tokens/s` : "";
  document.getElementById("job-state").textContent =
    `${d.state}${d.reason ? ": " + d.reason : ""}; step ${d.step ?? "-"}/${d.total_steps ?? "?"}${eff}`;
  renderChart(d);
  document.querySelector("#job-gpus tbody").replaceChildren(...d.gpus.map((g) => el("tr", {}, el("td", {}, gpuText(g)))));
  document.getElementById("job-attempts").replaceChildren(...(d.attempts.length ? d.attempts : ["attempt 1, no remedy taken"]).map((a) => el("li", {}, a)));
  const log = document.getElementById("job-log");
  const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.textContent = d.log.join("\n");
  if (atEnd) log.scrollTop = log.scrollHeight;
}

function save(format) {
  const chart = document.getElementById("chart");
  if (!chart.data) return;
  Plotly.downloadImage(chart, { format, filename: `${chartJob}-chart`, width: 1100, height: 520 });
}

function connect() {
  if (source) source.close();
  const status = document.getElementById("status");
  source = new EventSource(selected ? `/events?job=${encodeURIComponent(selected)}` : "/events");
  source.addEventListener("open", () => { status.textContent = "live"; status.className = "status live"; });
  source.addEventListener("error", () => { status.textContent = "reconnecting…"; status.className = "status down"; });
  source.addEventListener("lab", (e) => {
    const lab = JSON.parse(e.data);
    renderHosts(lab.hosts);
    renderJobs(lab.jobs);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  });
  source.addEventListener("job", (e) => renderJob(JSON.parse(e.data)));
}

window.addEventListener("hashchange", () => {
  selected = (location.hash.match(/job=([a-z0-9-]+)/) || [])[1] || null;
  chartJob = null;
  connect();
});
document.getElementById("save-png").addEventListener("click", () => save("png"));
document.getElementById("save-svg").addEventListener("click", () => save("svg"));
connect();

// Herald status page: reads statusz (same origin, the login cookie if any) every second and draws it.
// No library, nothing from elsewhere: the page's Content-Security-Policy allows this script, its style
// sheet and requests to this origin only. Every value from the broker (topic, client and node names) is
// set as text (textContent), never parsed as HTML.
"use strict";

(() => {
  const POLL_MS = 1000;
  const WINDOW_S = 300; // the charts keep five minutes (from one minute on, they widen as samples come)
  const MIN_WINDOW_S = 60;
  const SPARK_S = 60; // the top topics' sparklines: one minute (from ten seconds on)
  const MIN_SPARK_S = 10;

  const history = []; // { t, published, delivered, tcp, websocket, longpoll, sse }
  const topicHistory = new Map(); // topic -> [{ t, rate }]
  let lastNow = null;
  let lastOkAt = null;
  let lastStatus = null;

  const $ = (id) => document.getElementById(id);

  function css(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // ---- formatting ---------------------------------------------------------------------------------

  function number(n) {
    if (!Number.isFinite(n)) return "–";
    const a = Math.abs(n);
    if (a >= 1e9) return (n / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
    if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e4) return (n / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
    if (a > 0 && a < 10 && !Number.isInteger(n)) return n.toFixed(1);
    return Math.round(n).toLocaleString("en-US");
  }

  function bytes(n) {
    if (!Number.isFinite(n)) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return (i === 0 ? Math.round(n) : n.toFixed(n >= 100 ? 0 : 1)) + " " + units[i];
  }

  function duration(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    const d = Math.floor(seconds / 86400);
    const h = Math.floor((seconds % 86400) / 3600);
    const m = Math.floor((seconds % 3600) / 60);
    const s = seconds % 60;
    if (d > 0) return `${d}d ${h}h`;
    if (h > 0) return `${h}h ${m}m`;
    if (m > 0) return `${m}m ${s}s`;
    return `${s}s`;
  }

  function clock(date) {
    return date.toLocaleTimeString("en-GB", { hour12: false });
  }

  // ---- DOM helpers: text only ---------------------------------------------------------------------

  function text(id, value) {
    const el = $(id);
    if (el.textContent !== value) el.textContent = value;
  }

  function valued(id, raw, shown) {
    const el = $(id);
    el.dataset.value = String(raw);
    if (el.textContent !== shown) el.textContent = shown;
  }

  function cell(row, value, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    if (value instanceof Node) td.appendChild(value);
    else td.textContent = value;
    row.appendChild(td);
    return td;
  }

  function meter(share, warnAt, badAt) {
    const outer = document.createElement("div");
    const level = share >= badAt ? " bad" : share >= warnAt ? " warn" : "";
    outer.className = "meter" + level;
    const inner = document.createElement("span");
    const step = Math.max(0, Math.min(100, Math.round((share * 100) / 5) * 5));
    inner.className = "w" + step;
    outer.appendChild(inner);
    return outer;
  }

  function fillTable(id, rows, build) {
    const body = $(id).tBodies[0];
    const fresh = document.createDocumentFragment();
    for (const row of rows) {
      const tr = document.createElement("tr");
      build(tr, row);
      fresh.appendChild(tr);
    }
    body.replaceChildren(fresh);
    $(id).hidden = rows.length === 0;
    $(id + "-empty").hidden = rows.length !== 0;
  }

  // ---- charts: a hand-written line chart on canvas ---------------------------------------------

  function niceCeiling(value) {
    if (value <= 0) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 2.5, 5, 10]) {
      if (step * power >= value) return step * power;
    }
    return 10 * power;
  }

  function prepare(canvas) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    return { ctx, width, height };
  }

  /** The span shown: what the points cover, between min and max seconds (a fresh page is not a flat line at the right). */
  function span(points, now, min, max) {
    const covered = points.length > 0 ? (now - points[0].t) / 1000 : 0;
    return Math.min(max, Math.max(min, Math.ceil(covered / 10) * 10));
  }

  /** Series of { color, key, fill }, over history's points, newest at the right; integers: a y axis of whole numbers. */
  function lineChart(canvas, series, points, format, integers) {
    const { ctx, width, height } = prepare(canvas);
    if (width === 0 || height === 0) return;
    const pad = { left: 52, right: 12, top: 10, bottom: 22 };
    const plotW = width - pad.left - pad.right;
    const plotH = height - pad.top - pad.bottom;
    const now = points.length > 0 ? points[points.length - 1].t : Date.now();
    let max = 0;
    for (const p of points) for (const s of series) max = Math.max(max, p[s.key]);
    const top = integers ? 4 * Math.max(1, Math.ceil(niceCeiling(max / 4))) : niceCeiling(max);
    const shown = span(points, now, MIN_WINDOW_S, WINDOW_S);
    const x = (t) => pad.left + plotW * (1 - (now - t) / (shown * 1000));
    const y = (v) => pad.top + plotH * (1 - v / top);

    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    ctx.strokeStyle = css("--line");
    ctx.fillStyle = css("--muted");
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      const yy = Math.round(y(v)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(pad.left, yy);
      ctx.lineTo(width - pad.right, yy);
      ctx.stroke();
      ctx.fillText(format(v), pad.left - 6, yy);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const tick = shown <= 60 ? 10 : shown <= 180 ? 30 : 60;
    for (let s = 0; s <= shown; s += tick) {
      const xx = x(now - s * 1000);
      const label = s === 0 ? "now" : s % 60 === 0 ? `-${s / 60}m` : s > 60 ? `-${Math.floor(s / 60)}m${s % 60}s` : `-${s}s`;
      ctx.fillText(label, Math.min(Math.max(xx, pad.left + 10), width - pad.right - 14), height - pad.bottom + 6);
    }

    ctx.save();
    ctx.beginPath();
    ctx.rect(pad.left, pad.top - 2, plotW, plotH + 4);
    ctx.clip();
    for (const s of series) {
      if (points.length === 0) continue;
      ctx.beginPath();
      points.forEach((p, i) => (i === 0 ? ctx.moveTo(x(p.t), y(p[s.key])) : ctx.lineTo(x(p.t), y(p[s.key]))));
      if (s.fill) {
        ctx.save();
        ctx.lineTo(x(points[points.length - 1].t), y(0));
        ctx.lineTo(x(points[0].t), y(0));
        ctx.closePath();
        ctx.globalAlpha = 0.14;
        ctx.fillStyle = s.color;
        ctx.fill();
        ctx.restore();
        ctx.beginPath();
        points.forEach((p, i) => (i === 0 ? ctx.moveTo(x(p.t), y(p[s.key])) : ctx.lineTo(x(p.t), y(p[s.key]))));
      }
      ctx.strokeStyle = s.color;
      ctx.lineWidth = 2;
      ctx.lineJoin = "round";
      ctx.stroke();
      const last = points[points.length - 1];
      ctx.fillStyle = s.color;
      ctx.beginPath();
      ctx.arc(x(last.t), y(last[s.key]), 3, 0, Math.PI * 2);
      ctx.fill();
    }
    ctx.restore();
  }

  function sparkline(values, now) {
    const canvas = document.createElement("canvas");
    canvas.className = "spark";
    canvas.width = 120 * (window.devicePixelRatio || 1);
    canvas.height = 24 * (window.devicePixelRatio || 1);
    requestAnimationFrame(() => {
      const { ctx, width, height } = prepare(canvas);
      if (values.length === 0) return;
      const max = Math.max(...values.map((v) => v.rate), 1e-9);
      const shown = span(values, now, MIN_SPARK_S, SPARK_S);
      const x = (t) => width * (1 - (now - t) / (shown * 1000));
      const y = (v) => 2 + (height - 4) * (1 - v / max);
      ctx.beginPath();
      values.forEach((v, i) => (i === 0 ? ctx.moveTo(x(v.t), y(v.rate)) : ctx.lineTo(x(v.t), y(v.rate))));
      ctx.strokeStyle = css("--published");
      ctx.lineWidth = 1.5;
      ctx.stroke();
    });
    return canvas;
  }

  function drawCharts() {
    lineChart($("chart-messages"), [
      { key: "published", color: css("--published"), fill: true },
      { key: "delivered", color: css("--delivered") },
    ], history, number);
    lineChart($("chart-connections"), [
      { key: "tcp", color: css("--tcp"), fill: true },
      { key: "websocket", color: css("--websocket") },
      { key: "longpoll", color: css("--longpoll") },
      { key: "sse", color: css("--sse") },
    ], history, number, true);
  }

  // ---- rendering ---------------------------------------------------------------------------------

  function render(s) {
    const now = Date.parse(s.now);
    const fresh = s.now !== lastNow; // a second viewer within half a second gets the same sample
    lastNow = s.now;
    lastStatus = s;
    const connections = s.connections || {};
    const tcp = connections.tcp || 0;
    const websocket = connections.websocket || 0;
    const longpoll = connections.longpoll || 0;
    const sse = connections.sse || 0;
    const total = Object.values(connections).reduce((a, b) => a + b, 0);

    text("server-name", s.server_name);
    text("server-version", s.version);
    text("server-uptime", duration(s.uptime_seconds));
    const pill = $("server-status");
    pill.textContent = s.status;
    pill.className = "pill " + s.status;
    $("logout").hidden = !s.token_required;
    document.title = `${s.server_name}: Herald status`;

    valued("kpi-connections", total, number(total));
    text("kpi-tcp", number(tcp));
    text("kpi-websocket", number(websocket));
    text("kpi-longpoll", number(longpoll));
    text("kpi-sse", number(sse));
    valued("kpi-publish-rate", s.rates.published, number(s.rates.published));
    text("kpi-publish-bytes", bytes(s.rates.published_bytes));
    text("kpi-published-total", number(s.totals.published));
    valued("kpi-deliver-rate", s.rates.delivered, number(s.rates.delivered));
    text("kpi-sent-rate", number(s.rates.sent));
    text("kpi-sent-bytes", bytes(s.rates.sent_bytes));
    valued("kpi-subscriptions", s.subscriptions, number(s.subscriptions));
    text("kpi-topics", number(s.topics));
    valued("kpi-slow", s.slow_consumers.length, number(s.slow_consumers.length));
    text("kpi-slow-total", number(s.totals.slow_consumers));
    text("kpi-dropped-rate", number(s.rates.dropped));
    text("kpi-cpu", s.process.cpu_percent.toFixed(1));
    text("kpi-memory", bytes(s.process.working_set_bytes));
    text("kpi-heap", bytes(s.process.gc_heap_bytes));

    if (fresh) {
      history.push({ t: now, published: s.rates.published, delivered: s.rates.delivered, tcp, websocket, longpoll, sse });
      while (history.length > 0 && history[0].t < now - WINDOW_S * 1000) history.shift();
      for (const topic of s.top_topics.topics) {
        const values = topicHistory.get(topic.topic) || [];
        values.push({ t: now, rate: topic.published_per_second });
        topicHistory.set(topic.topic, values);
      }
      for (const [topic, values] of topicHistory) {
        while (values.length > 0 && values[0].t < now - SPARK_S * 1000) values.shift();
        if (values.length === 0) topicHistory.delete(topic);
      }
    }
    drawCharts();

    const top = s.top_topics;
    text("topics-note", `${number(top.tracked)} counted (at most ${number(top.max_tracked)})` +
      (top.untracked_per_second > 0 ? ` · ${number(top.untracked_per_second)}/s on topics not counted` : ""));
    fillTable("top-topics", top.topics, (tr, t) => {
      cell(tr, t.topic, "topic").title = t.topic;
      cell(tr, number(t.published_per_second), "num");
      cell(tr, sparkline(topicHistory.get(t.topic) || [], now));
      cell(tr, number(t.delivered_per_second), "num");
      cell(tr, bytes(t.bytes_per_second), "num");
      cell(tr, number(t.published), "num");
    });

    fillTable("slow-consumers", s.slow_consumers, (tr, c) => {
      cell(tr, c.name ? `#${c.cid} ${c.name}` : `#${c.cid}`, "name").title = c.name || "";
      cell(tr, c.transport);
      cell(tr, `${number(c.pending_messages)} · ${bytes(c.pending_bytes)}`, "num");
      cell(tr, meter(c.fill, 0.5, 0.9)).title = `${Math.round(c.fill * 100)} % of its limit (${c.policy})`;
      cell(tr, number(c.dropped), "num");
    });

    const compression = s.compression;
    const ratio = compression.bytes_in > 0 ? compression.bytes_out / compression.bytes_in : null;
    text("compression-note", !compression.enabled ? "off" : ratio === null ? "" : `overall ${Math.round(ratio * 100)} % of the original size, ${bytes(compression.bytes_in - compression.bytes_out)} saved`);
    fillTable("compression", compression.topics, (tr, c) => {
      cell(tr, c.topic, "topic").title = c.topic;
      cell(tr, meter(c.ratio, 0.6, 0.9)).title = `${Math.round(c.ratio * 100)} % of the original size${c.compressing ? "" : " (not worth it: probed now and then)"}`;
      cell(tr, c.ratio > 0 ? `×${(1 / c.ratio).toFixed(1)}` : "–", "num");
      cell(tr, number(c.samples), "num");
    });

    const lp = s.long_poll;
    text("longpoll-note", `${number(lp.sessions)} sessions · ${number(lp.held_polls)} polls held`);
    fillTable("long-poll", lp.listed, (tr, p) => {
      cell(tr, p.name ? `#${p.cid} ${p.name}` : `#${p.cid}`, "name").title = p.name || "";
      cell(tr, p.polling ? "polling" : "between polls", p.polling ? "state-polling" : "state-idle");
      cell(tr, duration(p.idle_seconds), "num");
      cell(tr, number(p.subscriptions), "num");
      cell(tr, number(p.pending_messages), "num");
    });

    const presence = s.presence; // absent when the broker does not grant presence
    $("presence-panel").hidden = !presence;
    if (presence) {
      text("presence-note", `${number(presence.members)} members (at most ${number(presence.max_members)}) · ${number(presence.events)} events sent, ${number(presence.events_suppressed)} suppressed`);
      text("presence-empty", presence.busiest ? "Nobody is present on any topic." : "Topics are not ranked by members on a cluster node.");
      fillTable("presence", presence.busiest || [], (tr, t) => {
        cell(tr, t.topic, "topic").title = t.topic;
        cell(tr, number(t.members), "num");
        cell(tr, number(t.identities), "num");
      });
    }

    const cluster = s.cluster;
    const shards = (cluster && cluster.shards) || [];
    $("cluster-panel").hidden = !cluster || (cluster.nodes.length < 2 && shards.length < 2);
    $("shards").hidden = shards.length < 2;
    if (shards.length > 1) {
      fillTable("shards", shards, (tr, sh) => {
        cell(tr, `${sh.index}`, "num");
        cell(tr, sh.endpoints.join(", "), "mono");
        cell(tr, sh.connected ? "connected" : "unreachable");
        cell(tr, number(sh.sent), "num");
        cell(tr, number(sh.received), "num");
        cell(tr, number(sh.dropped), "num");
        cell(tr, number(sh.subscriptions), "num");
        cell(tr, number(sh.inbound_queued), "num");
      });
    }
    if (cluster && (cluster.nodes.length > 1 || shards.length > 1)) {
      const reachable = shards.filter(sh => sh.connected).length;
      text("cluster-note", `${cluster.nodes.length} nodes · ` + (shards.length > 1
        ? `${reachable} of ${shards.length} shards connected`
        : `Redis ${cluster.connected ? "connected" : "unreachable"}`));
      const body = $("cluster").tBodies[0];
      const rows = document.createDocumentFragment();
      for (const n of cluster.nodes) {
        const tr = document.createElement("tr");
        const name = cell(tr, n.name, "name");
        if (n.self) {
          const self = document.createElement("span");
          self.className = "self";
          self.textContent = "this node";
          name.appendChild(self);
        }
        cell(tr, n.host, "mono");
        cell(tr, duration((now - Date.parse(n.started)) / 1000), "num");
        cell(tr, `${duration((now - Date.parse(n.last_seen)) / 1000)} ago`, "num");
        rows.appendChild(tr);
      }
      body.replaceChildren(rows);
    }
  }

  function setOffline(offline) {
    $("offline").hidden = !offline;
    if (offline) {
      text("offline-since", lastOkAt ? clock(lastOkAt) : "never");
      const pill = $("server-status");
      pill.textContent = "no answer";
      pill.className = "pill down";
    } else {
      lastOkAt = new Date();
      text("updated", "updated " + clock(lastOkAt));
    }
  }

  async function poll() {
    try {
      const response = await fetch("statusz", { cache: "no-store", credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.status === 401) {
        location.reload(); // the login expired or the token changed: the page asks for it again
        return;
      }
      if (!response.ok) throw new Error(`statusz answered ${response.status}`);
      render(await response.json());
      setOffline(false);
    } catch (e) {
      setOffline(true);
    }
    setTimeout(poll, POLL_MS);
  }

  window.addEventListener("resize", () => {
    if (lastStatus) drawCharts();
  });
  poll();
})();

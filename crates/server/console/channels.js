// Operator: channels' health and limits, each with a Test button (the channel's cheapest
// authenticated upstream call), and the main metrics as sparklines, polled every few seconds.

import { request } from './api.js';
import { h, fill, badge, table, num, say, card } from './ui.js';
import { parse, FIGURES, sparkline, show } from './metrics.js';

const POLL_MS = 3000;
const KEEP = 40;

export function mount(root) {
  let alive = true;
  let timer = null;
  let before = null;
  let beforeAt = 0;
  const history = Object.fromEntries(FIGURES.map((f) => [f.id, []]));
  // Channel tests by channel name ({state: 'running' | 'ok' | 'bad', text}), kept across the
  // table's refreshes.
  const tests = new Map();
  const channels = h('div', { id: 'channel-list' });
  const metrics = h('div', { id: 'metrics', 'data-state': 'loading' }, h('p', { class: 'empty' }, 'Loading metrics…'));
  root.append(card('Channels', channels), card('Metrics', metrics));

  async function loadChannels() {
    try {
      const page = await request('/admin/channels', { cred: 'admin' });
      if (!alive) return;
      fill(channels, table(['Channel', 'Kind', 'Health', 'In flight', 'Calls', 'Failures', 'Error rate', 'Failovers', 'Max concurrency', 'Max calls/s', 'Paced', 'Test'],
        page.data.map((c) => [
          h('strong', {}, c.name), c.kind, badge(c.healthy ? 'healthy' : 'unhealthy'), num(c.in_flight), num(c.calls), num(c.failures),
          `${(100 * (c.error_rate || 0)).toFixed(1)}%`, num(c.failovers), num(c.max_concurrency, '∞'), num(c.max_calls_per_sec, '∞'), num(c.calls_paced),
          testCell(c.name),
        ]), 'No video channels configured.'));
    } catch (err) {
      say(channels, 'error', err.message);
    }
  }

  /** The Test cell of channel `name`: its button and its last result, as text. */
  function testCell(name) {
    const cell = h('div', { class: 'channel-test', 'data-channel': name });
    showTest(cell, name);
    return cell;
  }

  function showTest(cell, name) {
    const t = tests.get(name);
    fill(cell,
      h('button', { type: 'button', class: 'small', disabled: t?.state === 'running', onclick: () => runTest(name) }, 'Test'),
      t ? h('span', { class: `test-result ${t.state}`, 'data-state': t.state, role: 'status' }, t.text) : null);
  }

  async function runTest(name) {
    tests.set(name, { state: 'running', text: 'Testing…' });
    refreshTest(name);
    try {
      const r = await request(`/admin/channels/${encodeURIComponent(name)}/test`, { cred: 'admin', method: 'POST' });
      const timing = r.http_status === null ? `${r.latency_ms} ms` : `HTTP ${r.http_status} in ${r.latency_ms} ms`;
      tests.set(name, { state: r.ok ? 'ok' : 'bad', text: `${r.status}: ${r.detail} (${timing})` });
    } catch (err) {
      tests.set(name, { state: 'bad', text: err.message });
    }
    if (alive) refreshTest(name);
  }

  /** Shows channel `name`'s test in the table as it is now (it is redrawn every poll). */
  function refreshTest(name) {
    for (const cell of channels.querySelectorAll('.channel-test')) {
      if (cell.dataset.channel === name) showTest(cell, name);
    }
  }

  async function loadMetrics() {
    let text;
    try {
      const res = await request('/metrics', { cred: 'admin', raw: true });
      text = await res.text();
    } catch (err) {
      if (!alive) return;
      metrics.dataset.state = 'unavailable';
      const why = err.status === 404 ? 'this relay does not serve /metrics' : err.message;
      fill(metrics, h('p', { class: 'note info', id: 'metrics-unavailable' }, `Metrics unavailable: ${why}.`));
      return;
    }
    if (!alive) return;
    const now = parse(text);
    const at = performance.now();
    const secs = before ? (at - beforeAt) / 1000 : 0;
    metrics.dataset.state = 'shown';
    const cards = FIGURES.map((fig) => {
      const v = fig.f(now, before, secs);
      const points = history[fig.id];
      points.push(v);
      if (points.length > KEEP) points.shift();
      return h('div', { class: 'metric', 'data-metric': fig.id },
        h('div', { class: 'metric-title' }, fig.title),
        h('div', { class: 'metric-value' }, show(v, fig.unit)),
        sparkline(points));
    });
    const health = now.filter((s) => s.name === 'relay_channel_healthy');
    fill(metrics, h('div', { class: 'metric-grid' }, cards),
      health.length ? h('p', { class: 'dim' }, 'Channel health: ',
        health.map((s) => h('span', { class: 'chip' }, `${s.labels.channel} `, badge(s.value ? 'healthy' : 'unhealthy')))) : null);
    before = now;
    beforeAt = at;
  }

  async function tick() {
    await Promise.all([loadChannels(), loadMetrics()]);
    if (alive) timer = setTimeout(tick, POLL_MS);
  }
  tick();
  return () => { alive = false; clearTimeout(timer); };
}

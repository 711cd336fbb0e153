// The Prometheus text format in a few lines, the figures the console draws from it, and
// sparklines as inline SVG.

/** Every sample of an exposition: {name, labels, value}. */
export function parse(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}

/** The sum of `name` over the samples whose labels pass `where`; null when there are none. */
export function sum(samples, name, where = () => true) {
  let total = null;
  for (const s of samples) {
    if (s.name === name && where(s.labels) && Number.isFinite(s.value)) total = (total ?? 0) + s.value;
  }
  return total;
}

const IN_FLIGHT = ['queued', 'running'];

/**
 * The charted figures. Each takes (now, before, seconds between them) and gives a number or
 * null: gauges read `now`; counters are a rate per second between two polls.
 */
export const FIGURES = [
  { id: 'requests', title: 'Requests', unit: '/s', f: rate('relay_http_requests_total') },
  { id: 'errors', title: 'Server errors', unit: '/s', f: rate('relay_http_requests_total', (l) => String(l.status).startsWith('5')) },
  { id: 'latency', title: 'Mean latency', unit: 'ms', f: mean('relay_http_request_duration_seconds', 1000) },
  { id: 'connections', title: 'Open connections', unit: '', f: gauge('relay_open_connections') },
  { id: 'tasks', title: 'Tasks in flight', unit: '', f: gauge('relay_tasks', (l) => IN_FLIGHT.includes(l.status)) },
  { id: 'upstream', title: 'Upstream calls', unit: '/s', f: rate('relay_upstream_calls_total') },
  { id: 'lag', title: 'Poller lag (mean)', unit: 's', f: mean('relay_poller_lag_seconds', 1) },
  { id: 'tokens', title: 'Chat tokens', unit: '/s', f: rate('relay_chat_tokens_total') },
  { id: 'credits', title: 'Ledger credits', unit: '/s', f: rate('relay_ledger_credits_total') },
  { id: 'limited', title: 'Rate limited', unit: '/s', f: rate('relay_rate_limited_total') },
];

function gauge(name, where) {
  return (now) => sum(now, name, where);
}

function rate(name, where) {
  return (now, before, secs) => {
    if (!before || !(secs > 0)) return null;
    const a = sum(now, name, where);
    const b = sum(before, name, where);
    if (a === null) return null;
    return Math.max(0, a - (b ?? 0)) / secs;
  };
}

/** A histogram's mean over the last interval: the change of `_sum` over the change of `_count`. */
function mean(name, scale) {
  return (now, before) => {
    if (!before) return null;
    const dc = (sum(now, `${name}_count`) ?? 0) - (sum(before, `${name}_count`) ?? 0);
    const ds = (sum(now, `${name}_sum`) ?? 0) - (sum(before, `${name}_sum`) ?? 0);
    return dc > 0 ? (ds / dc) * scale : 0;
  };
}

const SVG = 'http://www.w3.org/2000/svg';

/** A sparkline of `points` (numbers, or null for a poll without a value: left out), `w` x `h`
 * pixels, from zero at the bottom to the largest value at the top. */
export function sparkline(points, w = 180, h = 40) {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
  svg.setAttribute('width', w);
  svg.setAttribute('height', h);
  svg.setAttribute('class', 'spark');
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  const known = points.filter((p) => p !== null && Number.isFinite(p));
  if (known.length < 2) return svg;
  const max = Math.max(...known, 1e-9);
  const step = w / (known.length - 1);
  const xy = known.map((v, i) => [i * step, h - 2 - (v / max) * (h - 4)]);
  const line = xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
  const area = document.createElementNS(SVG, 'polygon');
  area.setAttribute('points', `${xy[0][0].toFixed(1)},${h} ${line} ${xy[xy.length - 1][0].toFixed(1)},${h}`);
  area.setAttribute('class', 'area');
  const poly = document.createElementNS(SVG, 'polyline');
  poly.setAttribute('points', line);
  poly.setAttribute('class', 'line');
  svg.append(area, poly);
  return svg;
}

/** A figure's value for people. */
export function show(v, unit) {
  if (v === null || v === undefined) return '…';
  const digits = Number.isInteger(v) || Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2;
  return `${v.toFixed(digits)}${unit && unit !== '' ? ` ${unit}` : ''}`;
}

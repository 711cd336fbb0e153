// Small DOM helpers: elements are built with textContent, never from HTML strings.

/** An element: h('div', {class: 'x', onclick: fn}, child, 'text', ...). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (name === 'value') {
      // The default too, so that a form's reset() comes back to it.
      if ('defaultValue' in el) el.defaultValue = String(value);
      el.value = value;
    }
    else if (value === true) el.setAttribute(name, '');
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A labelled form field around `input`. */
export function field(label, input, hint) {
  return h('label', { class: 'field' }, h('span', {}, label), input, hint ? h('small', {}, hint) : null);
}

/** A <select> of `options` (strings or [value, label]). */
export function select(id, options, value) {
  return h('select', { id, name: id },
    options.map((o) => {
      const [v, l] = Array.isArray(o) ? o : [o, o];
      return h('option', { value: v, selected: v === value }, l);
    }));
}

/** A coloured status word. */
export function badge(status) {
  const tone = {
    completed: 'ok', succeeded: 'ok', active: 'ok', healthy: 'ok', passed: 'ok',
    failed: 'bad', cancelled: 'muted', revoked: 'bad', expired: 'muted', unhealthy: 'bad', rejected: 'bad',
    queued: 'wait', in_progress: 'run', running: 'run', processing: 'run', pending: 'wait',
  }[status] || 'muted';
  return h('span', { class: `badge ${tone}`, 'data-status': status }, status);
}

/** A table with a header row; `rows` are arrays of cells (nodes or text). */
export function table(headers, rows, empty = 'nothing yet') {
  if (!rows.length) return h('p', { class: 'empty' }, empty);
  return h('div', { class: 'table-wrap' }, h('table', {},
    h('thead', {}, h('tr', {}, headers.map((t) => h('th', {}, t)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c)))))));
}

/** Unix seconds as a short local date and time (the time alone when it is today). */
export function when(secs) {
  if (secs === null || secs === undefined) return '—';
  const d = new Date(secs * 1000);
  const time = d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
  if (d.toDateString() === new Date().toDateString()) return time;
  return `${d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })} ${time}`;
}

/** A number with thousands separators; null as the given word. */
export function num(n, none = '—') {
  return n === null || n === undefined ? none : Number(n).toLocaleString('en-US', { maximumFractionDigits: 2 });
}

/** Bytes as KiB/MiB. */
export function size(bytes) {
  if (bytes === null || bytes === undefined) return '—';
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** A message line under a form: kind 'error' or 'info'. */
export function say(el, kind, text) {
  fill(el, text ? h('div', { class: `note ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text) : null);
}

/** A card: a titled panel. */
export function card(title, ...children) {
  return h('section', { class: 'card' }, title ? h('h2', {}, title) : null, ...children);
}

/** The value of a form control by id inside `root`, trimmed. */
export function val(root, id) {
  const el = root.querySelector(`#${id}`);
  return el ? String(el.value).trim() : '';
}

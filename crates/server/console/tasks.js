// Operator: tasks of every key and both formats, filtered, refreshed every few seconds.

import { request } from './api.js';
import { h, fill, field, select, badge, table, when, num, say, card, val } from './ui.js';

const REFRESH_MS = 4000;
const STATUSES = [['', 'any'], 'queued', 'in_progress', 'running', 'completed', 'succeeded', 'failed', 'cancelled'];

export function mount(root) {
  let alive = true;
  let timer = null;
  let after = null;
  const list = h('div', { id: 'task-list' });
  const more = h('div', { class: 'actions' });
  const form = h('form', { id: 'task-filter', class: 'inline' },
    field('Status', select('filter-status', STATUSES, '')),
    field('Model', h('input', { id: 'filter-model', placeholder: 'any' })),
    field('Key id', h('input', { id: 'filter-key', placeholder: 'key_… (any)' })),
    field('Limit', h('input', { id: 'filter-limit', type: 'number', min: 1, max: 1000, value: 50 })),
    h('label', { class: 'check' }, h('input', { id: 'filter-live', type: 'checkbox', checked: true }), ' Live'),
    h('button', { type: 'submit', class: 'primary' }, 'Show'));
  root.append(card('Tasks', form, list, more));

  form.addEventListener('submit', (e) => { e.preventDefault(); after = null; load(); });
  form.querySelector('#filter-live').addEventListener('change', () => load());

  async function load() {
    clearTimeout(timer);
    const q = new URLSearchParams();
    if (val(form, 'filter-status')) q.set('status', val(form, 'filter-status'));
    if (val(form, 'filter-model')) q.set('model', val(form, 'filter-model'));
    if (val(form, 'filter-key')) q.set('key_id', val(form, 'filter-key'));
    q.set('limit', val(form, 'filter-limit') || '50');
    if (after) q.set('after', after);
    try {
      const page = await request(`/admin/tasks?${q}`, { cred: 'admin' });
      if (!alive) return;
      fill(list, table(['Task', 'Format', 'Key', 'Model', 'Status', 'Progress', 'Channel', 'Price', 'Created', 'Updated', 'Error'],
        page.data.map((t) => [
          h('code', {}, t.id), t.kind === 'video' ? 'first' : 'second', h('code', { class: 'dim' }, t.key_id), t.model,
          badge(t.status), `${t.progress}%`, t.channel || '—', num(t.price), when(t.created_at), when(t.updated_at),
          t.error ? h('span', { class: 'bad' }, t.error.code) : '—',
        ]), 'No tasks match.'));
      fill(more,
        after ? h('button', { type: 'button', class: 'quiet', onclick: () => { after = null; load(); } }, 'Newest') : null,
        page.has_more && page.data.length
          ? h('button', { type: 'button', class: 'quiet', onclick: () => { after = page.data[page.data.length - 1].id; load(); } }, 'Older')
          : null);
    } catch (err) {
      say(list, 'error', err.message);
    }
    if (alive && !after && form.querySelector('#filter-live').checked) timer = setTimeout(load, REFRESH_MS);
  }

  load();
  return () => { alive = false; clearTimeout(timer); };
}

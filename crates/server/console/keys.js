// Operator: API keys (list, create, change, revoke) and a key's credit ledger.

import { request } from './api.js';
import { h, fill, field, select, badge, table, when, num, say, card, val } from './ui.js';

export function mount(root) {
  let alive = true;
  const createMessage = h('div', {});
  const created = h('div', { id: 'created-key' });
  const list = h('div', { id: 'key-list' });
  const detail = h('div', { id: 'key-detail' });
  const createForm = h('form', { id: 'key-create' },
    h('div', { class: 'row' },
      field('Name', h('input', { id: 'key-name', placeholder: 'alice' })),
      field('Group', h('input', { id: 'key-group', value: 'gen2' }))),
    h('div', { class: 'row' },
      field('Quota (credits)', h('input', { id: 'key-quota', type: 'number', min: 0, placeholder: 'unlimited' })),
      field('Rate (req/s)', h('input', { id: 'key-rps', type: 'number', min: 1, placeholder: 'default' })),
      field('Burst', h('input', { id: 'key-burst', type: 'number', min: 1, placeholder: 'default' }))),
    field('Models', h('input', { id: 'key-models', placeholder: 'all (or: model_h3, sim-chat)' })),
    h('div', { class: 'actions' }, h('button', { type: 'submit', id: 'key-create-submit', class: 'primary' }, 'Create key')),
    createMessage, created);
  root.append(h('div', { class: 'grid side' },
    card('New key', createForm),
    h('div', {}, card('Keys', list), detail)));

  createForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { name: val(createForm, 'key-name') || 'key', group: val(createForm, 'key-group') || 'gen2' };
    if (val(createForm, 'key-quota')) body.quota = Number(val(createForm, 'key-quota'));
    const rate = rateLimit(createForm, 'key-rps', 'key-burst');
    if (rate) body.rate_limit = rate;
    const models = modelList(val(createForm, 'key-models'));
    if (models) body.models = models;
    try {
      const key = await request('/admin/keys', { cred: 'admin', json: body });
      createForm.reset();
      say(createMessage, 'info', '');
      const secret = h('code', { id: 'new-key', class: 'secret' }, key.key);
      fill(created, h('div', { class: 'once' },
        h('strong', {}, `Key “${key.name}” created. `), 'This is the only time its secret is shown: copy it now.',
        h('div', { class: 'secret-row' }, secret,
          h('button', { type: 'button', class: 'small', onclick: async (ev) => {
            try { await navigator.clipboard.writeText(key.key); ev.target.textContent = 'Copied'; } catch { ev.target.textContent = 'Select and copy'; }
          } }, 'Copy'))));
      keys();
    } catch (err) {
      say(createMessage, 'error', err.message);
    }
  });

  async function keys() {
    try {
      const page = await request('/admin/keys', { cred: 'admin' });
      if (!alive) return;
      const rows = page.data.sort((a, b) => b.created_at - a.created_at).map((k) => [
        h('div', {}, h('strong', {}, k.name), ' ', h('code', {}, `${k.prefix}…`), h('br'), h('code', { class: 'dim' }, k.id)),
        k.group,
        k.quota === null ? h('span', { class: 'dim' }, 'unlimited') : num(k.quota_remaining),
        num(k.quota_used, '0'),
        k.rate_limit ? `${k.rate_limit.rps}/s, burst ${k.rate_limit.burst}` : h('span', { class: 'dim' }, 'default'),
        badge(k.status),
        h('span', { class: 'buttons' },
          h('button', { type: 'button', class: 'small', onclick: () => open(k) }, 'Open'),
          k.status === 'active'
            ? h('button', { type: 'button', class: 'small danger', onclick: () => revoke(k) }, 'Revoke')
            : h('button', { type: 'button', class: 'small', onclick: () => patch(k, { status: 'active' }) }, 'Restore')),
      ]);
      fill(list, table(['Key', 'Group', 'Quota left', 'Used', 'Rate limit', 'Status', ''], rows, 'No keys.'));
    } catch (err) {
      say(list, 'error', err.message);
    }
  }

  async function revoke(k) {
    if (!confirm(`Revoke key ${k.name} (${k.prefix}…)? It stops working at once.`)) return;
    try {
      await request(`/admin/keys/${k.id}`, { cred: 'admin', method: 'DELETE' });
      keys();
      if (detail.dataset.key === k.id) open({ ...k, status: 'revoked' });
    } catch (err) {
      say(list, 'error', err.message);
    }
  }

  async function patch(k, body, message) {
    try {
      const changed = await request(`/admin/keys/${k.id}`, { cred: 'admin', method: 'PATCH', json: body });
      keys();
      open(changed, 'Saved.');
    } catch (err) {
      say(message || list, 'error', err.message);
    }
  }

  /** The key's change form and its ledger. */
  async function open(k, notice = '') {
    detail.dataset.key = k.id;
    const message = h('div', {});
    if (notice) say(message, 'info', notice);
    const ledger = h('div', { id: 'ledger' }, h('p', { class: 'empty' }, 'Loading…'));
    const form = h('form', { id: 'key-edit' },
      h('div', { class: 'row' },
        field('Set quota', h('input', { id: 'edit-quota', type: 'number', min: 0, placeholder: k.quota === null ? 'unlimited' : String(k.quota) })),
        field('Top up', h('input', { id: 'edit-add', type: 'number', min: 1, placeholder: '+ credits' })),
        h('label', { class: 'check' }, h('input', { id: 'edit-unlimited', type: 'checkbox' }), ' Unlimited')),
      h('div', { class: 'row' },
        field('Group', h('input', { id: 'edit-group', value: k.group })),
        field('Rate (req/s)', h('input', { id: 'edit-rps', type: 'number', min: 1, value: k.rate_limit?.rps })),
        field('Burst', h('input', { id: 'edit-burst', type: 'number', min: 1, value: k.rate_limit?.burst })),
        field('Status', select('edit-status', ['active', 'revoked'], k.status))),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save changes')),
      message);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const body = {};
      if (form.querySelector('#edit-unlimited').checked) body.quota = null;
      else if (val(form, 'edit-quota')) body.quota = Number(val(form, 'edit-quota'));
      if (val(form, 'edit-add')) body.quota_add = Number(val(form, 'edit-add'));
      if (val(form, 'edit-group') !== k.group) body.group = val(form, 'edit-group');
      const rate = rateLimit(form, 'edit-rps', 'edit-burst');
      if (rate && (rate.rps !== k.rate_limit?.rps || rate.burst !== k.rate_limit?.burst)) body.rate_limit = rate;
      if (!val(form, 'edit-rps') && !val(form, 'edit-burst') && k.rate_limit) body.rate_limit = null;
      if (val(form, 'edit-status') !== k.status) body.status = val(form, 'edit-status');
      if (!Object.keys(body).length) { say(message, 'info', 'Nothing changed.'); return; }
      patch(k, body, message);
    });
    fill(detail,
      card(`Key “${k.name}”`, h('p', { class: 'dim' }, h('code', {}, k.id), ' · ', badge(k.status),
        ` · quota ${k.quota === null ? 'unlimited' : num(k.quota_remaining)} · used ${num(k.quota_used, '0')} · created ${when(k.created_at)}`), form),
      card('Ledger', ledger));
    try {
      const page = await request(`/admin/keys/${k.id}/ledger`, { cred: 'admin' });
      fill(ledger, table(['When', 'Kind', 'Amount', 'Balance after', 'Task'],
        page.data.slice().reverse().map((en) => [
          when(en.at), en.kind,
          h('span', { class: en.amount < 0 ? 'bad' : 'ok' }, en.amount > 0 ? `+${num(en.amount)}` : num(en.amount)),
          en.balance_after === null ? h('span', { class: 'dim' }, 'unlimited') : num(en.balance_after),
          en.task_id ? h('code', {}, en.task_id) : '—',
        ]), 'No credit movements yet.'));
    } catch (err) {
      say(ledger, 'error', err.message);
    }
  }

  keys();
  return () => { alive = false; };
}

function rateLimit(form, rpsId, burstId) {
  const rps = val(form, rpsId);
  const burst = val(form, burstId);
  if (!rps && !burst) return null;
  const r = Number(rps || burst);
  return { rps: r, burst: Number(burst || r) };
}

function modelList(text) {
  const models = text.split(/[\s,]+/).filter(Boolean);
  return models.length ? models : null;
}

// The console's shell: the credential fields and the hash-routed views.

import { credential, setCredential } from './api.js';
import * as playground from './playground.js';
import * as assets from './assets.js';
import * as chat from './chat.js';
import * as keys from './keys.js';
import * as tasks from './tasks.js';
import * as channels from './channels.js';

const VIEWS = { playground, assets, chat, keys, tasks, channels };

let stop = null;

function show() {
  const name = location.hash.replace(/^#\/?/, '').split('/')[0] || 'playground';
  const view = VIEWS[name] || playground;
  if (stop) stop();
  stop = null;
  for (const a of document.querySelectorAll('#tabs a')) {
    a.classList.toggle('current', a.dataset.view === name);
    if (a.dataset.view === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const root = document.getElementById('view');
  root.replaceChildren();
  root.dataset.view = name;
  stop = view.mount(root) || null;
}

function credentialForm(kind, formId, inputId, forgetId, stateId) {
  const form = document.getElementById(formId);
  const input = document.getElementById(inputId);
  const state = document.getElementById(stateId);
  const paint = () => {
    const value = credential(kind);
    state.textContent = value ? `set (${value.slice(0, 12)}…)` : 'not set';
    state.classList.toggle('set', Boolean(value));
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    setCredential(kind, input.value.trim());
    input.value = '';
  });
  document.getElementById(forgetId).addEventListener('click', () => setCredential(kind, ''));
  window.addEventListener('credentials', paint);
  paint();
}

credentialForm('key', 'key-form', 'api-key', 'key-forget', 'key-state');
credentialForm('admin', 'admin-form', 'admin-token', 'admin-forget', 'admin-state');
window.addEventListener('hashchange', show);
window.addEventListener('credentials', show);
show();

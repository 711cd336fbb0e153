// Asset libraries: create one, upload assets (a file or a URL), watch them turn active, delete.

import { request } from './api.js';
import { h, fill, field, select, badge, table, when, size, say, card, val } from './ui.js';

const POLL_MS = 1000;

export function mount(root) {
  let alive = true;
  let timer = null;
  let library = null;

  const libMessage = h('div', {});
  const libList = h('div', { id: 'libraries' });
  const createForm = h('form', { id: 'library-form', class: 'inline' },
    field('Name', h('input', { id: 'library-name', required: true, placeholder: 'campaign shots' })),
    h('button', { type: 'submit', class: 'primary' }, 'Create library'));
  const libraryBox = h('div', { id: 'library' }, h('p', { class: 'empty' }, 'Open a library to see and upload its assets.'));
  root.append(h('div', { class: 'grid side' },
    card('Libraries', createForm, libMessage, libList),
    card('Assets', libraryBox)));

  createForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const lib = await request('/v1/asset-libraries', { json: { name: val(createForm, 'library-name') } });
      createForm.reset();
      say(libMessage, 'info', `Created ${lib.id}`);
      await libraries();
      open(lib);
    } catch (err) {
      say(libMessage, 'error', err.message);
    }
  });

  async function libraries() {
    try {
      const list = await request('/v1/asset-libraries?limit=50');
      if (!alive) return;
      fill(libList, table(['Name', 'Family', 'Assets', ''],
        list.data.map((lib) => [
          h('div', {}, h('strong', {}, lib.name), h('br'), h('code', { class: 'dim' }, lib.id)),
          lib.family, String(lib.asset_count),
          h('span', { class: 'buttons' },
            h('button', { type: 'button', class: 'small', onclick: () => open(lib) }, 'Open'),
            h('button', { type: 'button', class: 'small danger', onclick: () => remove(lib) }, 'Delete')),
        ]), 'No libraries yet.'));
    } catch (err) {
      say(libList, 'error', err.message);
    }
  }

  async function remove(lib) {
    if (!confirm(`Delete library ${lib.name} and all its assets?`)) return;
    try {
      await request(`/v1/asset-libraries/${lib.id}`, { method: 'DELETE' });
      if (library && library.id === lib.id) {
        library = null;
        fill(libraryBox, h('p', { class: 'empty' }, 'Library deleted.'));
      }
      libraries();
    } catch (err) {
      say(libMessage, 'error', err.message);
    }
  }

  function open(lib) {
    library = lib;
    clearTimeout(timer);
    const message = h('div', {});
    const list = h('div', { id: 'asset-list' });
    const upload = h('form', { id: 'asset-form' },
      h('div', { class: 'row' },
        field('File', h('input', { id: 'asset-file', type: 'file' })),
        field('… or a URL', h('input', { id: 'asset-url', type: 'url', placeholder: 'https://…' })),
        field('Type', select('asset-type', [['', 'from the bytes'], 'image', 'video', 'audio'], ''))),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Upload')));
    fill(libraryBox,
      h('p', { class: 'lib-title' }, h('strong', {}, lib.name), ' ', h('code', { class: 'dim' }, lib.id), ' · family ', lib.family),
      upload, message, list);
    upload.addEventListener('submit', async (e) => {
      e.preventDefault();
      const file = upload.querySelector('#asset-file').files[0];
      const type = val(upload, 'asset-type');
      try {
        let asset;
        if (file) {
          const data = new FormData();
          if (type) data.append('type', type);
          data.append('file', file, file.name);
          asset = await request(`/v1/asset-libraries/${lib.id}/assets`, { form: data });
        } else {
          const body = { url: val(upload, 'asset-url') };
          if (type) body.type = type;
          asset = await request(`/v1/asset-libraries/${lib.id}/assets`, { json: body });
        }
        upload.reset();
        say(message, 'info', `Uploaded ${asset.id}: ${asset.status}`);
        assets(lib, list, message);
        libraries();
      } catch (err) {
        say(message, 'error', err.message);
      }
    });
    assets(lib, list, message);
  }

  /** Lists the library's assets; polls again while any is processing. */
  async function assets(lib, list, message) {
    clearTimeout(timer);
    try {
      const page = await request(`/v1/asset-libraries/${lib.id}/assets?limit=100`);
      if (!alive || library !== lib) return;
      fill(list, table(['Asset', 'Type', 'Status', 'Format', 'Size', 'Created', ''],
        page.data.map((a) => [
          h('code', {}, a.id), a.type || '—',
          h('span', {}, badge(a.status), a.error ? h('small', { class: 'bad' }, ` ${a.error.code}`) : null),
          a.format || '—', size(a.bytes), when(a.created_at),
          h('button', { type: 'button', class: 'small danger', onclick: async () => {
            try {
              await request(`/v1/assets/${a.id}`, { method: 'DELETE' });
              assets(lib, list, message);
              libraries();
            } catch (err) { say(message, 'error', err.message); }
          } }, 'Delete'),
        ]), 'No assets yet: upload one above.'));
      if (page.data.some((a) => a.status === 'processing')) {
        timer = setTimeout(() => assets(lib, list, message), POLL_MS);
      }
    } catch (err) {
      say(message, 'error', err.message);
    }
  }

  libraries();
  return () => { alive = false; clearTimeout(timer); };
}

// Playground: submit a video in either format, watch it live, play and download the result.

import { request, objectUrl, sameOrigin } from './api.js';
import { h, fill, field, select, badge, table, when, say, card, val } from './ui.js';

/** The second format's catalog (docs/api.md), for the form's choices. */
const CATALOG = {
  'gen2-pro': { resolutions: ['480p', '720p', '1080p'], durations: [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], ratios: ['adaptive', '16:9', '4:3', '1:1', '3:4', '9:16', '21:9'] },
  'gen2-lite': { resolutions: ['480p', '720p'], durations: [5, 10], ratios: ['adaptive', '16:9', '9:16', '1:1'] },
  'motion-1': { resolutions: ['720p', '1080p'], durations: [5, 10], ratios: ['16:9', '9:16', '1:1'] },
};
const FINAL = ['completed', 'failed', 'cancelled', 'succeeded'];
const POLL_MS = 1000;

export function mount(root) {
  let alive = true;
  let timer = null;
  const urls = [];
  const release = () => { while (urls.length) URL.revokeObjectURL(urls.pop()); };

  const message = h('div', { class: 'messages' });
  const format = h('div', { class: 'segmented', role: 'radiogroup' },
    h('label', {}, h('input', { type: 'radio', name: 'format', value: 'v1', checked: true }), ' First format ', h('code', {}, '/v1/videos')),
    h('label', {}, h('input', { type: 'radio', name: 'format', value: 'gen' }), ' Second format ', h('code', {}, '/v1/video/generations')));
  const fields = h('div', { class: 'fields' });
  const form = h('form', { id: 'video-form' },
    h('div', { class: 'format' }, format),
    field('Prompt', h('textarea', { id: 'prompt', rows: 3, required: true, placeholder: 'a heron takes off over a misty lake' })),
    fields,
    h('details', { class: 'advanced' }, h('summary', {}, 'Simulator directive'),
      field('x-relay-sim', h('input', { id: 'sim', placeholder: 'e.g. delay_ms=8000 or fail' }),
        'steers only the built-in simulator: fail, stuck, delay_ms=N, error=500')),
    h('div', { class: 'actions' }, h('button', { type: 'submit', id: 'submit', class: 'primary' }, 'Generate video')),
    message);

  const taskBox = h('div', { id: 'task' }, h('p', { class: 'empty' }, 'Submit a video, or pick one below, to watch it here.'));
  const recentBox = h('div', {});
  root.append(h('div', { class: 'grid two' },
    card('New video', form),
    card('Task', taskBox)),
  card('Recent tasks', recentBox));

  const firstFields = () => fill(fields,
    h('div', { class: 'row' },
      field('Model', h('input', { id: 'model', value: 'model_h3' })),
      field('Seconds', h('input', { id: 'seconds', type: 'number', min: 5, max: 15, value: 5 }))),
    h('div', { class: 'row' },
      field('Size', select('size', [['', 'from the ratio'], '1280x720', '720x1280', '960x960', '640x360', '360x640'], '')),
      field('Aspect ratio', select('aspect_ratio', ['adaptive', '16:9', '9:16', '1:1', '4:3', '3:4', '21:9'], 'adaptive'))),
    h('div', { class: 'row' },
      field('First frame (upload)', h('input', { id: 'image', type: 'file', accept: 'image/png,image/jpeg,image/webp' })),
      field('… or its URL', h('input', { id: 'image-url', type: 'url', placeholder: 'https://…' }))));

  const secondFields = () => {
    const model = select('gen-model', Object.keys(CATALOG), 'gen2-pro');
    const tiers = h('div', { class: 'row' });
    const paintTiers = () => {
      const m = CATALOG[model.value];
      fill(tiers,
        field('Resolution', select('resolution', m.resolutions, m.resolutions.includes('720p') ? '720p' : m.resolutions[0])),
        field('Duration (s)', select('duration', m.durations.map(String), '5')),
        field('Ratio', select('ratio', m.ratios, m.ratios[0])));
    };
    model.addEventListener('change', paintTiers);
    paintTiers();
    fill(fields,
      field('Model', model),
      tiers,
      h('div', { class: 'row' },
        field('First-frame asset', h('input', { id: 'first-frame', placeholder: 'asset_… (optional, from Assets)' })),
        h('label', { class: 'check' }, h('input', { id: 'last-frame', type: 'checkbox', checked: true }), ' Return the last frame')));
  };
  const currentFormat = () => form.querySelector('input[name=format]:checked').value;
  const paintFields = () => (currentFormat() === 'v1' ? firstFields() : secondFields());
  format.addEventListener('change', paintFields);
  paintFields();

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    say(message, 'info', 'Submitting…');
    const directive = val(form, 'sim');
    const headers = directive ? { 'x-relay-sim': directive } : {};
    try {
      let record;
      if (currentFormat() === 'v1') {
        const body = { model: val(form, 'model'), prompt: val(form, 'prompt'), seconds: val(form, 'seconds') };
        if (val(form, 'size')) body.size = val(form, 'size');
        else body.aspect_ratio = val(form, 'aspect_ratio');
        const file = form.querySelector('#image').files[0];
        if (val(form, 'image-url')) body.input_reference = val(form, 'image-url');
        if (file) {
          const data = new FormData();
          for (const [k, v] of Object.entries(body)) data.append(k, v);
          data.append('input_reference', file, file.name);
          record = await request('/v1/videos', { form: data, headers });
        } else {
          record = await request('/v1/videos', { json: body, headers });
        }
      } else {
        const body = {
          model: val(form, 'gen-model'), prompt: val(form, 'prompt'), resolution: val(form, 'resolution'),
          duration: Number(val(form, 'duration')), ratio: val(form, 'ratio'),
          return_last_frame: form.querySelector('#last-frame').checked,
        };
        if (val(form, 'first-frame')) body.assets = [{ id: val(form, 'first-frame'), role: 'first_frame' }];
        record = await request('/v1/video/generations', { json: body, headers });
      }
      say(message, 'info', `Accepted: ${record.task_id || record.id}`);
      watch(record);
      recent();
    } catch (err) {
      say(message, 'error', err.message);
    }
  });

  /** Polls the task until it is final, then shows the result. */
  function watch(record) {
    clearTimeout(timer);
    release();
    const id = record.task_id || record.id;
    const second = id.startsWith('gen_');
    const path = second ? `/v1/video/generations/${id}` : `/v1/videos/${id}`;
    const status = h('span', {});
    const bar = h('progress', { id: 'progress', max: 100, value: 0 });
    const pct = h('span', { class: 'pct' }, '0%');
    const details = h('dl', { class: 'facts' });
    const result = h('div', { class: 'result' });
    const cancel = h('button', { type: 'button', class: 'quiet', onclick: async () => {
      try { paint(await request(`${path}/cancel`, { method: 'POST' })); } catch (err) { say(result, 'error', err.message); }
    } }, 'Cancel');
    fill(taskBox, h('div', { class: 'task-head' }, h('code', { id: 'task-id' }, id), status, cancel),
      h('div', { class: 'progress' }, bar, pct), details, result);
    let shown = false;
    const paint = (r) => {
      fill(status, badge(r.status));
      bar.value = r.progress || 0;
      pct.textContent = `${r.progress || 0}%`;
      const framing = second ? `${r.resolution} · ${r.ratio}` : `${r.size} · ${r.aspect_ratio}`;
      fill(details,
        h('dt', {}, 'Model'), h('dd', {}, r.model),
        h('dt', {}, 'Framing'), h('dd', {}, framing),
        h('dt', {}, 'Duration'), h('dd', {}, `${r.duration} s`),
        h('dt', {}, 'Created'), h('dd', {}, when(r.created_at)),
        r.error ? [h('dt', {}, 'Error'), h('dd', { class: 'bad' }, `${r.error.code}: ${r.error.message}`)] : null);
      cancel.hidden = FINAL.includes(r.status);
      if (!shown && (r.status === 'completed' || r.status === 'succeeded')) {
        shown = true;
        show(r, id, second, result).catch((err) => say(result, 'error', err.message));
        recent();
      }
    };
    const poll = async () => {
      if (!alive) return;
      try {
        const r = await request(path);
        paint(r);
        if (FINAL.includes(r.status)) { recent(); return; }
      } catch (err) {
        say(result, 'error', err.message);
      }
      if (alive) timer = setTimeout(poll, POLL_MS);
    };
    paint(record);
    if (!FINAL.includes(record.status)) timer = setTimeout(poll, POLL_MS);
  }

  /** Plays the finished video in the page and offers it and its still image for download. */
  async function show(r, id, second, box) {
    fill(box, h('p', { class: 'empty' }, 'Loading the video…'));
    let video;
    let still = null;
    if (second) {
      video = await objectUrl(sameOrigin(r.video_url), true);
      if (r.last_frame_url) still = { url: await objectUrl(sameOrigin(r.last_frame_url), true), name: `${id}-last-frame.png`, label: 'Last frame' };
    } else {
      video = await objectUrl(`/v1/videos/${id}/content`);
      still = { url: await objectUrl(`/v1/videos/${id}/content?variant=thumbnail`), name: `${id}-thumbnail.png`, label: 'First frame' };
    }
    urls.push(video);
    if (still) urls.push(still.url);
    if (!alive) { release(); return; }
    fill(box,
      h('video', { id: 'player', src: video, controls: true, muted: true, autoplay: true, loop: true, playsinline: true }),
      h('div', { class: 'downloads' },
        h('a', { class: 'button', href: video, download: `${id}.mp4`, id: 'download-video' }, 'Download video'),
        still ? h('a', { class: 'button quiet', href: still.url, download: still.name, id: 'download-still' }, `Download ${still.label.toLowerCase()}`) : null),
      still ? h('figure', { class: 'still' }, h('img', { src: still.url, alt: still.label }), h('figcaption', {}, still.label)) : null);
  }

  /** The newest tasks of both formats. */
  async function recent() {
    try {
      const [a, b] = await Promise.all([request('/v1/videos?limit=6'), request('/v1/video/generations?limit=6')]);
      const all = [...a.data, ...b.data].sort((x, y) => y.created_at - x.created_at).slice(0, 8);
      if (!alive) return;
      fill(recentBox, table(['Task', 'Model', 'Status', 'Progress', 'Created', ''],
        all.map((r) => {
          const id = r.task_id || r.id;
          return [h('code', {}, id), r.model, badge(r.status), `${r.progress}%`, when(r.created_at),
            h('button', { type: 'button', class: 'quiet small', onclick: () => watch(r) }, 'Watch')];
        }), 'No tasks yet.'));
    } catch (err) {
      say(recentBox, 'error', err.message);
    }
  }
  recent();
  return () => { alive = false; clearTimeout(timer); release(); };
}

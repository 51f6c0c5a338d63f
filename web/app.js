// SPDX-License-Identifier: Apache-2.0
/*
 * app.js — the Sluice browser client: record (or pick) an answer per
 * question, upload each straight to storage, watch the grades arrive.
 * Plain JavaScript, no build step; served by `sluice presign` at "/", so the
 * API below is same-origin. See README ("Browser client") for the flow.
 *
 *  1. Record with MediaRecorder (Opus in WebM or Ogg where the browser can,
 *     else what it records) and upload that as it is: the pipeline's
 *     preflight stage decodes it. Or pick a file.
 *  2. POST /v1/submissions declares every answer's type and size (with an
 *     Idempotency-Key, so a retry never creates two), and gets a presigned
 *     PUT URL per question, the results token and the results URL.
 *  3. Answers up to MULTIPART_OVER bytes: one PUT to the presigned URL (XHR,
 *     for upload progress). Larger ones: S3 multipart through presign's
 *     Companion-style /s3/multipart endpoints, PART_SIZE parts one at a time;
 *     the upload id and every finished part are saved in localStorage, so
 *     after a reload the page lists the stored parts and sends only the
 *     missing ones (the file must be chosen again: browsers do not keep it).
 *  4. GET the results URL once, then follow its server-sent events
 *     (EventSource on <results URL>/events, the results token as
 *     access_token: EventSource cannot send headers): each "question" event
 *     is that question's new state, "complete" ends it. EventSource
 *     reconnects by itself with Last-Event-ID, so a dropped stream resumes
 *     without losing or repeating a change, and it does not stop after 10
 *     minutes. Where the stream is unavailable (no EventSource, or the
 *     server refuses the stream: an older server, a proxy, too many
 *     streams) the page polls instead: GET with If-None-Match every 2 s for
 *     the first 30 s, then 5 s, 10 s, 30 s; stop after 10 minutes or once
 *     all are finished; never while the tab is hidden. The server's
 *     Retry-After and poll object say the same and win. The submission id
 *     and token stay in localStorage, so a later visit shows the results.
 */
'use strict';

const PART_SIZE = 5 * 1024 * 1024;        // S3's minimum for every part but the last
const MULTIPART_OVER = 8 * 1024 * 1024;   // larger answers go up in parts
const MAX_RECORD_S = 300;
const POLL_STOP_S = 600;
const LEAVE_NOTE_S = 30;
const SUB_KEY = 'sluice.submission';      // {id, token, results_url, accepted_at_ms, questions}
const UPLOAD_KEY = (sid, no) => `sluice.upload.${sid}.${no}`; // {uploadId, key, parts}

const $ = (sel, root = document) => root.querySelector(sel);
const answers = new Map(); // question no -> {blob, name}
let sub = null;            // the saved submission
let poll = { timer: 0, etag: null, stopped: false, view: null, announced: new Set() };

/* ---------- small helpers ---------- */

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') e.textContent = v;
    else if (v !== false && v != null) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) e.append(c);
  return e;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const load = (k) => { try { return JSON.parse(localStorage.getItem(k)); } catch { return null; } };
const save = (k, v) => localStorage.setItem(k, JSON.stringify(v));
const fmtBytes = (n) => n < 1048576 ? `${Math.round(n / 1024)} KB` : `${(n / 1048576).toFixed(1)} MB`;

function randomKey() {
  const b = crypto.getRandomValues(new Uint8Array(16)); // works outside secure contexts too
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

function announce(text) {
  const a = $('#announcer');
  a.append(el('p', { text }));
  while (a.childElementCount > 5) a.firstElementChild.remove();
}

/* A JSON request to presign; throws Error(message) with .status on failure. */
async function api(method, url, body, token, extra = {}) {
  const headers = { ...extra };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (token) headers.Authorization = `Bearer ${token}`;
  for (let attempt = 0; ; attempt++) {
    const r = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
    if (r.ok) return json;
    const ra = Number(r.headers.get('Retry-After'));
    // 503: try later; 404 + Retry-After: the submission is not visible yet
    if ((r.status === 503 || (r.status === 404 && ra)) && attempt < 10) {
      await sleep((ra || 2) * 1000);
      continue;
    }
    const e = new Error(json?.error?.message || `${method} ${url}: HTTP ${r.status}`);
    e.status = r.status;
    e.code = json?.error?.code;
    throw e;
  }
}

/* PUT bytes with progress; resolves to the ETag header. */
function put(url, blob, headers, onProgress) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open('PUT', url);
    for (const [k, v] of Object.entries(headers || {}))
      if (k.toLowerCase() !== 'content-length') x.setRequestHeader(k, v); // the browser sets it
    x.upload.onprogress = (e) => onProgress(e.loaded);
    x.onload = () => x.status >= 200 && x.status < 300
      ? resolve(x.getResponseHeader('ETag'))
      : reject(Object.assign(new Error(`storage refused the upload (HTTP ${x.status})`), { status: x.status }));
    x.onerror = () => reject(new Error('network error while uploading'));
    x.onabort = () => reject(new Error('upload aborted'));
    x.send(blob);
  });
}

/* ---------- recording ---------- */

/* What MediaRecorder should produce: Opus in WebM (Chrome, Firefox, Safari
 * 18.4+) or Ogg, else whatever the browser records (MP4/AAC on older
 * Safari). The upload is the recording itself: the preflight stage decodes
 * it on the server, so nothing is converted here (the 16 kHz WAV this page
 * used to send is 5.5x the bytes of WebM/Opus at 32 kbit/s: docs/benchmarks.md). */
const RECORD_TYPES = ['audio/webm;codecs=opus', 'audio/ogg;codecs=opus', 'audio/webm', 'audio/mp4'];
// Opus at 32 kbit/s is transparent for speech; browsers default to 128
// (Chromium's kDefaultAudioBitRate), which would be a quarter of 16 kHz WAV
const RECORD_BPS = 32000;
const EXT = { 'audio/webm': 'webm', 'audio/ogg': 'ogg', 'audio/mp4': 'm4a', 'audio/mpeg': 'mp3',
              'audio/wav': 'wav', 'audio/flac': 'flac' };

function recordType() {
  return RECORD_TYPES.find((t) => MediaRecorder.isTypeSupported?.(t)) || '';
}

const recorder = { rec: null, no: 0, tick: 0, stopTimer: 0 };

async function toggleRecord(li) {
  const no = Number(li.dataset.no), btn = $('.record', li);
  if (recorder.rec && recorder.no === no) { recorder.rec.stop(); return; }
  if (recorder.rec) return; // another question is recording
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (e) {
    setStatus(li, `The microphone is not available (${e.name}). Choose a file instead.`, true);
    return;
  }
  const type = recordType();
  const chunks = [], rec = new MediaRecorder(stream, type ? { mimeType: type, audioBitsPerSecond: RECORD_BPS }
                                                         : { audioBitsPerSecond: RECORD_BPS });
  rec.ondataavailable = (e) => { if (e.data.size) chunks.push(e.data); };
  rec.onstop = () => {
    stream.getTracks().forEach((t) => t.stop());
    clearInterval(recorder.tick);
    clearTimeout(recorder.stopTimer);
    recorder.rec = null;
    btn.setAttribute('aria-pressed', 'false');
    btn.textContent = 'Record';
    setRecordButtons(false);
    const raw = new Blob(chunks, { type: rec.mimeType });
    const ext = EXT[contentType(raw, '')];
    setAnswer(li, raw, ext ? `answer-${no}.${ext}` : `answer-${no}`);
  };
  recorder.rec = rec;
  recorder.no = no;
  rec.start(250);
  const t0 = Date.now();
  btn.setAttribute('aria-pressed', 'true');
  btn.textContent = 'Stop';
  setRecordButtons(true, no);
  setStatus(li, 'Recording… 0:00');
  recorder.tick = setInterval(() => {
    const s = Math.floor((Date.now() - t0) / 1000);
    setStatus(li, `Recording… ${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`);
  }, 1000);
  recorder.stopTimer = setTimeout(() => rec.state !== 'inactive' && rec.stop(), MAX_RECORD_S * 1000);
}

function setRecordButtons(busy, except) {
  for (const b of document.querySelectorAll('.record'))
    b.disabled = busy && Number(b.closest('.question').dataset.no) !== except;
}

/* ---------- the question form ---------- */

function setStatus(li, text, isError = false) {
  const s = $('.status', li);
  s.textContent = text;
  s.classList.toggle('error', isError);
}

function contentType(blob, name) {
  const t = (blob.type || '').split(';')[0].trim().toLowerCase();
  if (t === 'audio/x-wav' || t === 'audio/wave') return 'audio/wav';
  if (t) return t;
  const ext = (name.split('.').pop() || '').toLowerCase();
  if (ext === 'oga' || ext === 'opus') return 'audio/ogg';
  return Object.keys(EXT).find((t) => EXT[t] === ext) || 'application/octet-stream';
}

function setAnswer(li, blob, name) {
  const no = Number(li.dataset.no);
  answers.set(no, { blob, name });
  const audio = $('audio', li);
  if (audio.src) URL.revokeObjectURL(audio.src);
  audio.src = URL.createObjectURL(blob);
  audio.hidden = false;
  setStatus(li, `Answer ready: ${name} (${fmtBytes(blob.size)})`);
  li.dataset.answer = 'ready';
  if (sub) resumeWith(li, no, blob); // after a reload: the file to resume with
  else $('#send').disabled = answers.size !== document.querySelectorAll('.question').length;
}

function buildQuestion(li) {
  const no = li.dataset.no, pid = `prompt-${no}`;
  $('.prompt', li).id = pid;
  const rec = el('button', { type: 'button', class: 'record', 'aria-pressed': 'false',
                             'aria-describedby': pid, text: 'Record' });
  rec.addEventListener('click', () => toggleRecord(li));
  const fid = `file-${no}`;
  const file = el('input', { type: 'file', id: fid, class: 'file-input', accept: 'audio/*',
                             'aria-describedby': pid });
  file.addEventListener('change', () => { if (file.files[0]) setAnswer(li, file.files[0], file.files[0].name); });
  const label = el('label', { for: fid, class: 'file-label', text: 'Choose a file' });
  const bar = el('progress', { max: '100', value: '0', hidden: true, 'aria-label': `Upload of answer ${no}` });
  li.append(el('div', { class: 'controls' }, rec, file, label),
            el('audio', { controls: true, hidden: true, 'aria-label': `Your answer to question ${no}` }),
            bar, el('p', { class: 'status', text: 'No answer yet.' }));
}

function showFormError(text) {
  const p = $('#form-error');
  p.textContent = text;
  p.hidden = !text;
}

async function send(ev) {
  ev.preventDefault();
  const btn = $('#send');
  btn.disabled = true;
  showFormError('');
  const items = [...document.querySelectorAll('.question')].map((li) => {
    const no = Number(li.dataset.no), a = answers.get(no);
    return { li, no, a, type: contentType(a.blob, a.name), prompt: $('.prompt', li).textContent.trim() };
  });
  const body = { questions: items.map((q) => ({ no: q.no, content_type: q.type, size: q.a.blob.size, prompt: q.prompt })) };
  let created;
  try {
    const key = randomKey(); // the same key on every retry of this create
    for (let attempt = 0; ; attempt++) {
      try {
        created = await api('POST', 'v1/submissions', body, credential(), { 'Idempotency-Key': key });
        break;
      } catch (e) {
        if (e.status || attempt >= 3) throw e; // a network error: the same request again
        await sleep(1000);
      }
    }
  } catch (e) {
    if (e.status === 401) $('#credential').focus();
    showFormError(e.status === 401
      ? `Your access key was not accepted: ${e.message}`
      : `Your answers could not be sent: ${e.message}`);
    btn.disabled = false;
    return;
  }
  const urls = new Map(created.questions.map((q) => [q.no, q]));
  sub = { id: created.submission_id, token: created.results_token, results_url: created.results_url,
          accepted_at_ms: Date.now(),
          questions: items.map((q) => ({ no: q.no, prompt: q.prompt, size: q.a.blob.size, type: q.type,
                                         name: q.a.name, url: urls.get(q.no).url, headers: urls.get(q.no).headers,
                                         key: urls.get(q.no).object_key, uploaded: false })) };
  save(SUB_KEY, sub);
  for (const b of document.querySelectorAll('.record, .file-input')) b.disabled = true;
  showResults();
  await Promise.all(items.map((q) => upload(q.li, sub.questions.find((s) => s.no === q.no), q.a.blob)));
}

/* ---------- uploads ---------- */

function progress(li, done, total) {
  const bar = $('progress', li);
  bar.hidden = false;
  bar.value = Math.round((100 * done) / total);
  setStatus(li, `Uploading… ${bar.value}% of ${fmtBytes(total)}`);
}

async function upload(li, q, blob) {
  li.dataset.upload = 'uploading';
  try {
    if (blob.size > MULTIPART_OVER) await uploadParts(li, q, blob);
    else await put(q.url, blob, q.headers, (n) => progress(li, n, blob.size));
    progress(li, blob.size, blob.size);
    q.uploaded = true;
    save(SUB_KEY, sub);
    li.dataset.upload = 'done';
    setStatus(li, 'Uploaded. Analysing…');
  } catch (e) {
    if (e.code === 'already_uploaded') { // finished before a reload could record it
      q.uploaded = true;
      save(SUB_KEY, sub);
      localStorage.removeItem(UPLOAD_KEY(sub.id, q.no));
      li.dataset.upload = 'done';
      setStatus(li, 'Uploaded. Analysing…');
      return;
    }
    li.dataset.upload = 'error';
    setStatus(li, `Upload failed: ${e.message}`, true);
  }
}

/* S3 multipart through presign's /s3/multipart endpoints, resumable. */
async function uploadParts(li, q, blob) {
  const mp = 's3/multipart', rkey = UPLOAD_KEY(sub.id, q.no);
  let rec = load(rkey);
  const nparts = Math.ceil(blob.size / PART_SIZE);
  if (rec) { // resuming: storage says which parts it has
    try {
      const listed = await api('GET', `${mp}/${encodeURIComponent(rec.uploadId)}?key=${encodeURIComponent(rec.key)}`,
                               undefined, sub.token);
      rec.parts = listed.filter((p) => p.PartNumber <= nparts && p.Size === partLen(blob.size, p.PartNumber))
                        .map((p) => ({ PartNumber: p.PartNumber, ETag: p.ETag }));
    } catch (e) {
      if (e.status !== 404) throw e;
      rec = null; // the upload is gone (aborted or expired): start again
    }
  }
  if (!rec) {
    const c = await api('POST', mp, { filename: q.name, type: q.type,
                                      metadata: { submission_id: sub.id, question_no: q.no } }, sub.token);
    rec = { uploadId: c.uploadId, key: c.key, parts: [] };
  }
  save(rkey, rec);
  const have = new Set(rec.parts.map((p) => p.PartNumber));
  let done = rec.parts.reduce((n, p) => n + partLen(blob.size, p.PartNumber), 0);
  progress(li, done, blob.size);
  for (let n = 1; n <= nparts; n++) {
    if (have.has(n)) continue;
    const signed = await api('GET', `${mp}/${encodeURIComponent(rec.uploadId)}/${n}?key=${encodeURIComponent(rec.key)}`,
                             undefined, sub.token);
    const start = (n - 1) * PART_SIZE, part = blob.slice(start, start + partLen(blob.size, n));
    const etag = await put(signed.url, part, {}, (b) => progress(li, done + b, blob.size));
    if (!etag) throw new Error('storage did not expose the part ETag (bucket CORS)');
    rec.parts.push({ PartNumber: n, ETag: etag });
    save(rkey, rec);
    done += part.size;
  }
  rec.parts.sort((a, b) => a.PartNumber - b.PartNumber);
  await api('POST', `${mp}/${encodeURIComponent(rec.uploadId)}/complete?key=${encodeURIComponent(rec.key)}`,
            { parts: rec.parts }, sub.token);
  localStorage.removeItem(rkey);
}

function partLen(size, n) { return Math.min(PART_SIZE, size - (n - 1) * PART_SIZE); }

/* After a reload: an answer not uploaded yet is resumed with the same file. */
function resumeWith(li, no, blob) {
  const q = sub.questions.find((s) => s.no === no);
  if (!q || q.uploaded) return;
  if (blob.size !== q.size) {
    setStatus(li, `That is not the same answer: ${fmtBytes(blob.size)}, but ${fmtBytes(q.size)} was sent. ` +
                  'Choose the same file.', true);
    return;
  }
  $('.file-input', li).disabled = true;
  upload(li, q, blob);
}

function restoreUploads() {
  for (const li of document.querySelectorAll('.question')) {
    const no = Number(li.dataset.no), q = sub.questions.find((s) => s.no === no);
    $('.record', li).disabled = true;
    if (!q || q.uploaded) {
      $('.file-input', li).disabled = true;
      setStatus(li, q ? 'Uploaded.' : 'Not part of this submission.');
      li.dataset.upload = q ? 'done' : 'none';
      continue;
    }
    const rec = load(UPLOAD_KEY(sub.id, no));
    li.dataset.upload = 'interrupted';
    setStatus(li, `The upload of ${q.name} was interrupted${rec ? ` after ${rec.parts.length} part(s)` : ''}. ` +
                  'Choose the same file again to resume.', true);
  }
}

/* ---------- results ---------- */

function showResults() {
  $('#results').hidden = false;
  $('#send').hidden = true;
  renderView(null);
  $('#results-title').focus();
  startPolling();
}

/* A question's state is the stage of the pipeline it reached; the view
 * lists them in order (view.stages, from the pipeline description), so a
 * stage the operator added shows up here by its name. */
function pendingText(state, stages) {
  if (state === 'awaiting_upload') return 'waiting for the upload…';
  const i = (stages || []).indexOf(state), label = `${state.replace(/_/g, ' ')}…`;
  return i < 0 ? label : `step ${i + 1} of ${stages.length}: ${label}`;
}

function renderView(view) {
  const list = $('#result-list');
  const byNo = new Map((view?.questions || []).map((q) => [q.no, q]));
  for (const q of sub.questions) {
    let li = list.querySelector(`[data-no="${q.no}"]`);
    if (!li) {
      li = el('li', { class: 'result', 'data-no': q.no },
              el('h3', { text: `Question ${q.no}` }), el('p', { class: 'muted', text: q.prompt }),
              el('div', { class: 'body' }));
      list.append(li);
    }
    const v = byNo.get(q.no), state = v?.state || 'awaiting_upload';
    if (v && state !== 'awaiting_upload' && !q.uploaded) { // storage has it: nothing to resume
      q.uploaded = true;
      save(SUB_KEY, sub);
      localStorage.removeItem(UPLOAD_KEY(sub.id, q.no));
      const qi = document.querySelector(`.question[data-no="${q.no}"]`);
      if (qi && qi.dataset.upload !== 'uploading') {
        qi.dataset.upload = 'done';
        setStatus(qi, 'Uploaded.');
      }
    }
    if (li.dataset.state === state && state !== 'done') continue;
    li.dataset.state = state;
    const body = $('.body', li);
    body.replaceChildren();
    if (state === 'done' && v.grade) {
      const g = v.grade;
      body.append(el('p', { class: 'score' }, 'Score ', el('strong', { text: String(Math.round(g.score)) }),
                     `/100 · level ${g.level}`),
                  el('p', { text: g.feedback || '' }));
      if (Array.isArray(g.criteria) && g.criteria.length) { // each criterion with its evidence
        body.append(el('table', { class: 'criteria' },
          el('caption', { text: 'Criteria' }),
          ...g.criteria.map((c) => el('tr', {},
            el('th', { scope: 'row', text: String(c.name || '') }),
            el('td', { class: 'num', text: String(Math.round(Number(c.score) || 0)) }),
            el('td', { text: String(c.comment || '') })))));
      }
      if (v.transcript) body.append(el('p', { class: 'transcript', text: `“${v.transcript}”` }));
      if (!poll.announced.has(q.no)) {
        poll.announced.add(q.no);
        announce(`Question ${q.no} graded: ${Math.round(g.score)} out of 100, level ${g.level}.`);
      }
    } else if (state === 'failed' || state === 'done') {
      body.append(el('p', { class: 'score', text: 'Could not be graded' }),
                  el('p', { text: v?.error?.message || 'no grade was produced' }));
      if (!poll.announced.has(q.no)) {
        poll.announced.add(q.no);
        announce(`Question ${q.no} could not be graded.`);
      }
    } else {
      body.append(el('p', { class: 'pending', text: pendingText(state, view?.stages) }));
    }
  }
}

function policyDelay(ageS) {
  return ageS < 30 ? 2 : ageS < 60 ? 5 : ageS < 120 ? 10 : 30;
}

function stopPolling(text) {
  poll.stopped = true;
  clearTimeout(poll.timer);
  $('#poll-status').textContent = text;
}

function schedule(seconds) {
  clearTimeout(poll.timer);
  if (poll.stopped || document.hidden) return; // visibilitychange starts it again
  if (poll.es) return; // the stream brings the changes
  poll.timer = setTimeout(pollOnce, seconds * 1000);
}

function ageS() { return (Date.now() - (poll.view?.accepted_at_ms || sub.accepted_at_ms)) / 1000; }

async function pollOnce() {
  if (poll.stopped || document.hidden || poll.inflight) return;
  poll.inflight = true;
  try { await pollStep(); } finally { poll.inflight = false; }
}

async function pollStep() {
  const headers = { Authorization: `Bearer ${sub.token}` };
  if (poll.etag) headers['If-None-Match'] = poll.etag;
  let next = null;
  try {
    const r = await fetch(sub.results_url, { headers, cache: 'no-store' });
    const ra = r.headers.get('Retry-After');
    if (ra !== null && /^\d+$/.test(ra)) next = Number(ra);
    if (r.status === 200) {
      poll.etag = r.headers.get('ETag');
      poll.view = await r.json();
      renderView(poll.view);
      const s = poll.view.summary;
      $('#poll-status').textContent = `${s.done + s.failed} of ${s.total} finished.`;
      if (poll.view.poll?.stop) {
        stopPolling(s.complete ? 'All answers are finished.'
                               : 'Stopped checking after 10 minutes. Reload the page to check again.');
        return;
      }
      next = poll.view.poll?.retry_after_s || next;
      if (!poll.streamTried) { // the view is there: follow its events from now on
        poll.streamTried = true;
        if (startStream()) return;
      }
    } else if (r.status === 304) {
      // unchanged; Retry-After (if any) is already in next
    } else if (r.status === 404 && ageS() > 30) {
      stopPolling('This submission is no longer available.');
      return;
    }
  } catch {
    /* offline for a moment: try again on the policy */
  }
  if (ageS() >= POLL_STOP_S) {
    stopPolling('Stopped checking after 10 minutes. Reload the page to check again.');
    return;
  }
  if (ageS() >= LEAVE_NOTE_S && !poll.view?.summary?.complete) $('#leave-note').hidden = false;
  schedule(next || policyDelay(ageS()));
}

/* A question's new state from the stream, merged into the view. */
function applyEvent(q) {
  if (!poll.view) return;
  const qs = poll.view.questions.filter((x) => x.no !== q.no);
  qs.push(q);
  qs.sort((a, b) => a.no - b.no);
  poll.view.questions = qs;
  const s = poll.view.summary;
  s.done = qs.filter((x) => x.state === 'done').length;
  s.failed = qs.filter((x) => x.state === 'failed').length;
  renderView(poll.view);
  $('#poll-status').textContent = `${s.done + s.failed} of ${s.total} finished.`;
}

/* Follows the submission's events; false when the browser has no
 * EventSource. A stream the server refuses (EventSource gives up: CLOSED)
 * falls back to polling; one that drops is resumed by EventSource itself. */
function startStream() {
  if (!window.EventSource || poll.stopped) return false;
  const es = new EventSource(`${sub.results_url}/events?access_token=${encodeURIComponent(sub.token)}`);
  poll.es = es;
  clearTimeout(poll.timer);
  es.addEventListener('open', () => { poll.streamed = true; });
  es.addEventListener('question', (e) => applyEvent(JSON.parse(e.data)));
  es.addEventListener('complete', () => {
    es.close();
    poll.es = null;
    stopPolling('All answers are finished.');
  });
  es.addEventListener('error', () => {
    if (es.readyState !== EventSource.CLOSED || poll.es !== es) return; // reconnecting by itself
    poll.es = null;
    if (!poll.stopped) schedule(policyDelay(ageS())); // unavailable: poll instead
  });
  return true;
}

function startPolling() {
  if (poll.es) poll.es.close();
  poll = { timer: 0, etag: null, stopped: false, view: null, inflight: false, es: null,
           streamTried: false, announced: poll.announced };
  const note = setInterval(() => {
    if (poll.stopped || poll.view?.summary?.complete) return clearInterval(note);
    if (ageS() >= LEAVE_NOTE_S) { $('#leave-note').hidden = false; clearInterval(note); }
  }, 1000);
  pollOnce();
}

document.addEventListener('visibilitychange', () => {
  if (!sub || poll.stopped || poll.es) return;
  if (document.hidden) clearTimeout(poll.timer);
  else pollOnce();
});

/* ---------- start ---------- */

function startOver() {
  if (sub) for (const q of sub.questions) localStorage.removeItem(UPLOAD_KEY(sub.id, q.no));
  localStorage.removeItem(SUB_KEY);
  location.reload();
}

/* The credential that creates submissions: from the URL fragment
 * (#credential=..., then removed from the address bar) or the field. Kept
 * for this tab only (sessionStorage), never in localStorage. */
const CRED_KEY = 'sluice.credential';
function credential() {
  const v = $('#credential').value.trim();
  if (v) sessionStorage.setItem(CRED_KEY, v);
  return v || null;
}
function loadCredential() {
  const m = /(?:^|&)credential=([^&]+)/.exec(location.hash.slice(1));
  if (m) {
    sessionStorage.setItem(CRED_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  $('#credential').value = sessionStorage.getItem(CRED_KEY) || '';
}

function init() {
  loadCredential();
  for (const li of document.querySelectorAll('.question')) buildQuestion(li);
  $('#answers').addEventListener('submit', send);
  $('#start-over').addEventListener('click', startOver);
  if (!window.MediaRecorder || !navigator.mediaDevices)
    for (const b of document.querySelectorAll('.record')) { b.disabled = true; b.title = 'Recording is not supported here'; }
  sub = load(SUB_KEY);
  if (sub && sub.id && sub.token && sub.results_url) { // a revisit: show what we have
    $('#send').hidden = true;
    restoreUploads();
    $('#results').hidden = false;
    renderView(null);
    startPolling();
  } else {
    sub = null;
  }
}

init();

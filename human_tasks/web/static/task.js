/* The web task: browser check, fullscreen, practice, blocks and breaks, frame-synchronous
 * timed trials on a canvas, and a local queue that posts every trial until the server
 * acknowledges it. Durations arrive in ms and are converted to frames with the refresh
 * rate measured here; every phase's onset/offset (requestAnimationFrame timestamps),
 * duration and frame count are logged and sent with the answer. See docs/web.md. */
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const C = $("session").dataset; // token and API path, from the page (no inline script: the CSP forbids it)
  const canvas = $("stage");
  const ctx = canvas.getContext("2d");
  const screenEl = $("screen");
  const gridEl = $("grid");
  const statusEl = $("status");
  const progressEl = $("progress");
  const progressBar = $("progress-bar");
  /* The counter and, beside it, a bar filled to the share of trials done (``fraction``, 0..1). */
  function showProgress(text, fraction) {
    progressEl.textContent = text;
    progressBar.hidden = !text;
    progressBar.firstElementChild.style.width = `${Math.round(100 * Math.min(1, Math.max(0, fraction || 0)))}%`;
  }

  /* Browser check: median of CHECK.intervals rAF intervals after a warm-up; unstable when
   * more than maxOutlierShare of the intervals are off the median by more than a factor
   * `outlier` (a dropped frame doubles an interval). Headless and busy browsers drop a few
   * frames; a tenth of the intervals doubling is common there and harmless for timing. */
  const CHECK = { intervals: 150, warmup: 10, minHz: 48, maxHz: 500, outlier: 1.5, maxOutlierShare: 0.2,
                  timeoutMs: 15000 };
  // serve --refresh-hz
  Object.assign(CHECK, { minHz: window.cuebenchDevice.RULES.minHz, maxHz: window.cuebenchDevice.RULES.maxHz });
  const IMAGE_CSS_PX = 224; // without a size in degrees: the images' own 224 px, in CSS pixels
  const CARD_MM = { width: 85.6, height: 53.98 }; // ISO/IEC 7810 ID-1: a credit, bank or ID card
  const CARD_DEFAULT_CSS_PX = 323; // the card's width at 96 CSS px per inch
  const FEEDBACK_MS = 1000; // practice feedback, as long as the lab runner shows it
  const ODDITY_GAP_CSS_PX = 40;
  const DROPPED_FACTOR = 1.2; // an interval longer than 1.2 refresh periods is a dropped frame
  const QUEUE_KEY = "cuebench-queue:" + C.token;
  const BACKOFF_MS = { first: 500, max: 30000 };
  const REQUEST_TIMEOUT_MS = 15000; // a request unanswered this long counts as a network error and is retried
  const IMAGE_ATTEMPTS = 5; // an image still failing after 5 tries (about 8 s of back-off) stops the session

  /* ms -> frames: nearest whole frame (half rounds up), at least 1 frame for a non-zero phase. */
  function msToFrames(ms, hz) {
    if (!ms) return 0;
    return Math.max(1, Math.round((ms * hz) / 1000));
  }

  const nextFrame = () => new Promise((resolve) => requestAnimationFrame(resolve));
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const state = (name, index) => {
    document.body.dataset.state = name;
    if (index !== undefined) document.body.dataset.trialIndex = String(index);
  };

  // ---------------------------------------------------------------- events during a trial
  let trialEvents = [];
  const logEvent = (type, detail) => trialEvents.push(Object.assign({ type, t: performance.now() }, detail || {}));
  window.addEventListener("blur", () => logEvent("blur"));
  window.addEventListener("focus", () => logEvent("focus"));
  document.addEventListener("visibilitychange", () => logEvent("visibility", { state: document.visibilityState }));
  document.addEventListener("fullscreenchange", () =>
    logEvent(document.fullscreenElement ? "fullscreen_enter" : "fullscreen_exit"));

  let keyHandler = null;
  document.addEventListener("keydown", (e) => { if (keyHandler) keyHandler(e); });

  // ---------------------------------------------------------------- canvas drawing
  function fitCanvas() {
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(window.innerWidth * dpr);
    canvas.height = Math.round(window.innerHeight * dpr);
  }
  window.addEventListener("resize", fitCanvas);
  fitCanvas();

  function clear() {
    ctx.fillStyle = "#808080";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
  }
  function drawFixation() {
    clear();
    const dpr = window.devicePixelRatio || 1;
    const cx = canvas.width / 2, cy = canvas.height / 2, arm = 12 * dpr;
    ctx.strokeStyle = "#000";
    ctx.lineWidth = 3 * dpr;
    ctx.beginPath();
    ctx.moveTo(cx - arm, cy); ctx.lineTo(cx + arm, cy);
    ctx.moveTo(cx, cy - arm); ctx.lineTo(cx, cy + arm);
    ctx.stroke();
  }
  function drawImages(bitmaps, numbered) {
    clear();
    const dpr = window.devicePixelRatio || 1;
    const size = imageCssPx * dpr, gap = ODDITY_GAP_CSS_PX * dpr;
    const total = bitmaps.length * size + (bitmaps.length - 1) * gap;
    const x0 = (canvas.width - total) / 2, y0 = (canvas.height - size) / 2;
    bitmaps.forEach((bitmap, i) => {
      const x = x0 + i * (size + gap);
      ctx.drawImage(bitmap, x, y0, size, size);
      if (numbered) {
        ctx.fillStyle = "#fff";
        ctx.font = `${24 * dpr}px system-ui, sans-serif`;
        ctx.textAlign = "center";
        ctx.fillText(String(i + 1), x + size / 2, y0 + size + 36 * dpr);
      }
    });
  }
  function drawPrompt(text) {
    clear();
    const dpr = window.devicePixelRatio || 1;
    ctx.fillStyle = "#fff";
    ctx.font = `${22 * dpr}px system-ui, sans-serif`;
    ctx.textAlign = "center";
    ctx.fillText(text, canvas.width / 2, canvas.height / 2);
  }

  // ---------------------------------------------------------------- overlays
  /* Show a text screen and wait for its button (or the space bar). The click is a user
   * gesture, so it is also where fullscreen is (re-)requested. */
  function showScreen(html, button, name) {
    state(name);
    screenEl.innerHTML = html + (button ? `<p><button id="continue">${button}</button></p>` : "");
    screenEl.hidden = false;
    if (!button) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        keyHandler = null;
        if (!document.fullscreenElement && document.documentElement.requestFullscreen) {
          document.documentElement.requestFullscreen().catch(() => logEvent("fullscreen_denied"));
        }
        screenEl.hidden = true;
        resolve();
      };
      $("continue").addEventListener("click", done, { once: true });
      keyHandler = (e) => { if (e.code === "Space") { e.preventDefault(); done(); } };
    });
  }
  const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

  /* The researcher's texts (EXPDIR/texts/*.md), rendered by the server with HTML escaped. */
  let texts = {};

  // ---------------------------------------------------------------- screen calibration
  /* Where the experiment sets the image size in degrees of visual angle, the person matches an
   * on-screen card to a real one (pixels per mm, as jsPsych's virtual-chinrest does) and gives
   * the viewing distance, typed or measured from the blind spot; the image is then 2 d tan(deg / 2)
   * wide, capped to fit the window. */
  let imageCssPx = IMAGE_CSS_PX;

  function stimulusSize(display, pxPerMm, distanceCm, maxImages) {
    const wanted = 2 * distanceCm * 10 * Math.tan((display.stimulus_degrees * Math.PI) / 360) * pxPerMm;
    const room = Math.min((window.innerWidth - 80 - (maxImages - 1) * ODDITY_GAP_CSS_PX) / maxImages,
                          window.innerHeight - 160);
    return { px: Math.min(wanted, room), capped: wanted > room };
  }

  /* The virtual chinrest's distance (Li, Joo, Yeatman & Reinecke 2020, Sci. Rep. 10:904): with the
   * right eye covered and the left on a square, a dot moving left vanishes in the blind spot,
   * display.blind_spot_degrees from fixation; distance = mean(square-to-dot mm) / tan(that angle).
   * The mm are those of the dot last drawn when the key went down: what the person saw vanish. */
  const BLIND_SPOT = { sweeps: 5, maxTries: 10, mmPerSecond: 50, squareCssPx: 30, dotCssPx: 24,
                       rightMarginCssPx: 60, pauseMs: 600 };

  const blindSpotSquareX = () => window.innerWidth - BLIND_SPOT.rightMarginCssPx - BLIND_SPOT.squareCssPx / 2;

  function blindSpotSweep(pxPerMm, dot) {
    const squareX = blindSpotSquareX();
    return new Promise((resolve) => {
      let mm = 0, start = null, frame;
      const travel = (now) => {
        if (start === null) start = now;
        const next = ((now - start) / 1000) * BLIND_SPOT.mmPerSecond;
        const x = squareX - next * pxPerMm;
        if (x < BLIND_SPOT.dotCssPx) { keyHandler = null; dot.hidden = true; resolve(null); return; }
        mm = next;
        dot.style.left = `${x - BLIND_SPOT.dotCssPx / 2}px`;
        dot.dataset.mm = String(mm);
        dot.hidden = false;
        frame = requestAnimationFrame(travel);
      };
      keyHandler = (e) => {
        if (e.code !== "Space") return;
        e.preventDefault();
        cancelAnimationFrame(frame);
        keyHandler = null;
        dot.hidden = true;
        resolve(mm);
      };
      frame = requestAnimationFrame(travel);
    });
  }

  async function measureBlindSpot(display, pxPerMm) {
    state("blind-spot");
    screenEl.innerHTML =
      "<h1>Viewing distance</h1><p>Sit as you will sit during the study. Cover your <b>right</b> eye with your " +
      "right hand and look at the black square with your left eye. Keep looking at the square: a red dot moves " +
      "away from it to the left. Press the space bar the moment the dot disappears.</p>" +
      `<p id="blind-spot-count">Dot 1 of ${BLIND_SPOT.sweeps}. Press the space bar to start.</p>` +
      '<div id="blind-spot-square" class="blind-spot-square"></div><div id="blind-spot-dot" class="blind-spot-dot" hidden></div>';
    screenEl.hidden = false;
    const count = $("blind-spot-count"), square = $("blind-spot-square"), dot = $("blind-spot-dot");
    Object.assign(square.style, { width: `${BLIND_SPOT.squareCssPx}px`, height: `${BLIND_SPOT.squareCssPx}px` });
    Object.assign(dot.style, { width: `${BLIND_SPOT.dotCssPx}px`, height: `${BLIND_SPOT.dotCssPx}px` });
    square.style.left = `${blindSpotSquareX() - BLIND_SPOT.squareCssPx / 2}px`;
    await new Promise((resolve) => {
      keyHandler = (e) => { if (e.code === "Space") { e.preventDefault(); keyHandler = null; resolve(); } };
    });
    const sweeps = [];
    for (let tries = 0; sweeps.length < BLIND_SPOT.sweeps && tries < BLIND_SPOT.maxTries; tries++) {
      count.textContent = `Dot ${sweeps.length + 1} of ${BLIND_SPOT.sweeps}: press the space bar when it disappears.`;
      const mm = await blindSpotSweep(pxPerMm, dot);
      if (mm !== null) sweeps.push(mm);
      await sleep(BLIND_SPOT.pauseMs);
    }
    screenEl.hidden = true;
    if (sweeps.length < BLIND_SPOT.sweeps) return null;
    const mean = sweeps.reduce((a, b) => a + b, 0) / sweeps.length;
    const distance = mean / Math.tan((display.blind_spot_degrees * Math.PI) / 180) / 10;
    return distance >= 20 && distance <= 300 ? { sweeps, distance } : null;
  }

  function calibrationPage(display, cardPx, distance, note) {
    state("calibration");
    screenEl.innerHTML =
      "<h1>Screen size</h1><p>Hold a credit card (or a bank or ID card of the same size) flat against the " +
      "screen over the grey card and move the slider until both are exactly as wide.</p>" +
      `<div id="card" class="card"></div><p><input id="card-size" type="range" min="100" max="900" step="1" ` +
      `value="${cardPx}" aria-label="card width"></p>` +
      `<p><label>Distance from your eyes to the screen: <input id="distance" type="number" min="20" max="300" ` +
      `step="0.1" value="${distance}"> cm</label> <button id="measure-distance" type="button">Measure it</button></p>` +
      `<p>Please sit about ${display.viewing_distance_cm} cm from the screen and stay there during the study.</p>` +
      `<p class="error" id="calibration-error">${escapeHtml(note)}</p><p><button id="continue">Continue</button></p>`;
    screenEl.hidden = false;
    const card = $("card"), slider = $("card-size");
    let moved = false;
    const draw = () => {
      card.style.width = `${slider.value}px`;
      card.style.height = `${(slider.value * CARD_MM.height) / CARD_MM.width}px`;
    };
    slider.addEventListener("input", () => { moved = true; draw(); });
    draw();
    return new Promise((resolve) => {
      const read = (action) => () => resolve({ action, cardPx: Number(slider.value), typed: $("distance").value,
                                               moved });
      $("continue").addEventListener("click", read("continue"), { once: true });
      $("measure-distance").addEventListener("click", read("measure"), { once: true });
    });
  }

  async function calibrate(display, maxImages) {
    let cardPx = CARD_DEFAULT_CSS_PX, shown = String(display.viewing_distance_cm), measured = null, note = "";
    let cardMoved = false; // a card size nobody matched is the default, not a measurement
    for (;;) {
      const page = await calibrationPage(display, cardPx, shown, note);
      cardPx = page.cardPx;
      cardMoved = cardMoved || page.moved;
      const pxPerMm = cardPx / CARD_MM.width;
      if (page.action === "measure") {
        measured = await measureBlindSpot(display, pxPerMm);
        if (measured) measured.cardPx = cardPx;
        shown = measured ? measured.distance.toFixed(1) : page.typed;
        note = measured ? "" : "The distance could not be measured; please try again or type it.";
        continue;
      }
      const fromBlindSpot = measured !== null && page.typed === measured.distance.toFixed(1);
      if (fromBlindSpot && cardPx !== measured.cardPx) { // the dot's mm were counted on the old card size
        measured = null;
        shown = "";
        note = "The card size changed after the distance was measured; please measure it again or type it.";
        continue;
      }
      const distance = fromBlindSpot ? measured.distance : Number(page.typed);
      if (Number.isFinite(distance) && distance >= 20 && distance <= 300) {
        const size = stimulusSize(display, pxPerMm, distance, maxImages);
        screenEl.hidden = true;
        return { px_per_mm: pxPerMm, viewing_distance_cm: distance, stimulus_css_px: size.px, capped: size.capped,
                 device_pixel_ratio: window.devicePixelRatio || 1, card_moved: cardMoved,
                 ...(fromBlindSpot ? { method: "card+blind-spot", blind_spot_mm: measured.sweeps }
                   : { method: "card+entered-distance" }) };
      }
      shown = page.typed;
      note = "Please enter the distance in centimetres (20 to 300).";
    }
  }

  // ---------------------------------------------------------------- questionnaire
  /* The study's own questions (EXPDIR/texts/questionnaire.json), after the last trial; the server
   * checks the answers against the same declaration and names any problem, shown here. */
  function questionHtml(q) {
    const name = `q-${q.id}`;
    const prompt = `<p class="question-prompt">${escapeHtml(q.prompt)}${q.required ? " *" : ""}</p>`;
    const radios = (values, labels) => values.map((v, i) =>
      `<label class="option"><input type="radio" name="${name}" value="${escapeHtml(String(v))}"> ` +
      `${escapeHtml(String(labels[i]))}</label>`).join("");
    let field;
    if (q.kind === "choice") field = radios(q.options, q.options);
    else if (q.kind === "likert") {
      const points = Array.from({ length: q.points }, (_, i) => i + 1);
      const anchors = q.anchors || ["", ""];
      field = `<span class="anchor">${escapeHtml(anchors[0])}</span>${radios(points, points)}` +
              `<span class="anchor">${escapeHtml(anchors[1])}</span>`;
    } else if (q.kind === "number") {
      field = `<input type="number" step="any" name="${name}"${q.min != null ? ` min="${q.min}"` : ""}` +
              `${q.max != null ? ` max="${q.max}"` : ""}>`;
    } else field = `<textarea name="${name}" rows="3" maxlength="2000"></textarea>`;
    return `<div class="question" data-id="${q.id}">${prompt}<div class="field">${field}</div></div>`;
  }

  function questionnaireAnswers(questions) {
    const answers = {};
    for (const q of questions) {
      const name = `q-${q.id}`;
      if (q.kind === "choice" || q.kind === "likert") {
        const checked = screenEl.querySelector(`input[name="${name}"]:checked`);
        if (checked) answers[q.id] = q.kind === "likert" ? Number(checked.value) : checked.value;
      } else {
        const value = screenEl.querySelector(`[name="${name}"]`).value.trim();
        if (value !== "") answers[q.id] = q.kind === "number" ? Number(value) : value;
      }
    }
    return answers;
  }

  async function askQuestionnaire(questions) {
    showProgress("", 0);
    state("questionnaire");
    screenEl.innerHTML = `<h1>A few questions</h1><form id="questionnaire">${questions.map(questionHtml).join("")}` +
      '</form><p class="error" id="questionnaire-error"></p><p><button id="continue">Submit</button></p>';
    screenEl.hidden = false;
    for (;;) {
      await new Promise((resolve) => $("continue").addEventListener("click", resolve, { once: true }));
      const answers = questionnaireAnswers(questions);
      const missing = questions.filter((q) => q.required && !(q.id in answers));
      if (missing.length) {
        $("questionnaire-error").textContent = `Please answer: ${missing.map((q) => q.prompt).join("; ")}`;
        continue;
      }
      const result = await withRetry(() => requestJSON(`${C.api}/questionnaire`,
                                                       { method: "POST", body: JSON.stringify(answers) }));
      if (result.ok) { screenEl.hidden = true; return; }
      $("questionnaire-error").textContent = result.body.error || `The answers could not be saved (${result.status}).`;
    }
  }

  function showOutcome(outcome) {
    showProgress("", 0);
    const text = outcome.message ? `<div id="ended-text">${outcome.message}</div>` // the server ended it early
      : outcome.status === "screened_out"
      ? "<h1>Thank you for your interest</h1><p>Unfortunately this computer or browser does not meet the " +
        "requirements of the study, so the study ends here.</p>" +
        `<p id="screen-fix">${escapeHtml(screenFix(outcome.reason))}</p>`
      : `<div id="completion-text">${texts.completion || ""}</div><div id="debrief-text">${texts.debrief || ""}</div>`;
    const link = outcome.redirect ? `<p><a id="redirect" href="${escapeHtml(outcome.redirect)}">Return to Prolific</a></p>` : "";
    const code = outcome.code  // none for a session past the time limit
      ? `<p>Your completion code is</p><p class="code" id="code" data-status="${outcome.status}">` +
        `${escapeHtml(outcome.code)}</p>`
      : `<p id="code" data-status="${outcome.status}" hidden></p>`;
    showScreen(`${text}${code}${link}`, null, "done");
    if (document.fullscreenElement) document.exitFullscreen().catch(() => {});
    if (outcome.redirect) setTimeout(() => { window.location.href = outcome.redirect; }, 5000);
  }

  // ---------------------------------------------------------------- server I/O and the local queue
  async function requestJSON(url, options) {
    const response = await fetch(url, Object.assign({ headers: { "Content-Type": "application/json" },
                                                      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }, options));
    const body = await response.json().catch(() => ({}));
    return { status: response.status, ok: response.ok, body };
  }
  async function withRetry(call) {
    for (let wait = BACKOFF_MS.first; ; wait = Math.min(wait * 2, BACKOFF_MS.max)) {
      try {
        const result = await call();
        if (result.status < 500 && result.status !== 429) return result;
      } catch (err) { /* network error: retry */ }
      statusEl.textContent = "connection problem, retrying…";
      await sleep(wait);
    }
  }

  /* Unsent trials live in localStorage (index -> payload) so a reload or a crash loses
   * nothing; they are posted oldest first and removed only when the server answers.
   * A 4xx other than 429 is final (the server named the problem), anything else retries. */
  const queue = (() => { try { return JSON.parse(localStorage.getItem(QUEUE_KEY)) || {}; } catch (e) { return {}; } })();
  const refused = [];
  let ended = null; // the outcome of a session the server ended early (serve --time-limit, --end-on-failed-attention)
  let flushing = null;
  const saveQueue = () => localStorage.setItem(QUEUE_KEY, JSON.stringify(queue));
  function enqueue(index, payload) {
    queue[index] = payload;
    saveQueue();
    flush();
  }
  async function drain() {
    while (Object.keys(queue).length) {
      const index = Math.min(...Object.keys(queue).map(Number));
      const result = await withRetry(() => requestJSON(`${C.api}/trial/${index}`,
        { method: "POST", body: JSON.stringify(queue[index]) }));
      if (!result.ok) refused.push({ index, status: result.status, error: result.body.error });
      if (result.body.outcome) ended = result.body.outcome; // the server ended the session (time limit, attention)
      delete queue[index];
      saveQueue();
      statusEl.textContent = "";
    }
  }
  function flush() {
    if (!flushing) flushing = drain().finally(() => { flushing = null; });
    return flushing;
  }

  // ---------------------------------------------------------------- browser check
  async function measureRefresh() {
    const intervals = [];
    let last = await nextFrame();
    for (let i = 0; i < CHECK.warmup + CHECK.intervals; i++) {
      const t = await nextFrame();
      if (i >= CHECK.warmup) intervals.push(t - last);
      last = t;
    }
    const sorted = intervals.slice().sort((a, b) => a - b);
    const mid = sorted.length / 2;
    const median = sorted.length % 2 ? sorted[Math.floor(mid)] : (sorted[mid - 1] + sorted[mid]) / 2;
    const outliers = intervals.filter((x) => x > CHECK.outlier * median || x < median / CHECK.outlier).length;
    return { hz: 1000 / median, median_ms: median, outlier_share: outliers / intervals.length, n: intervals.length };
  }
  async function browserCheck() {
    state("check");
    screenEl.innerHTML = "<p>Checking your display… please keep this window visible.</p>";
    screenEl.hidden = false;
    const refresh = await Promise.race([measureRefresh(), sleep(CHECK.timeoutMs).then(() => null)]);
    screenEl.hidden = true;
    const { size, pointer } = window.cuebenchDevice.measure();
    const reason = judgeCheck(refresh, size, pointer);
    return { ok: reason === null, reason, refresh, size, pointer };
  }
  /* Why a measured display fails the check, or null when it passes: the device rules of the consent
   * page (device.js) and a steady refresh rate. */
  function judgeCheck(refresh, size, pointer) {
    if (!refresh) return "the browser drew no animation frames (hidden window?)";
    if (refresh.hz < CHECK.minHz || refresh.hz > CHECK.maxHz) return `refresh rate ${refresh.hz.toFixed(1)} Hz`;
    if (refresh.outlier_share > CHECK.maxOutlierShare)
      return `unstable frame timing (${(100 * refresh.outlier_share).toFixed(0)}% irregular frames)`;
    const problem = window.cuebenchDevice.deviceProblem(size, pointer);
    return problem ? problem.reason : null;
  }
  /* What a screened-out participant can change, from the reason the check gave. */
  function screenFix(reason) {
    if (/^refresh rate|^unstable|animation frames/.test(reason || "")) {
      return `Your display ${reason}; the study needs a steady ${CHECK.minHz}–${CHECK.maxHz} Hz. Close other ` +
             "programs and browser tabs, keep this window visible, or try another browser or computer.";
    }
    const { size, pointer } = window.cuebenchDevice.measure();
    const problem = window.cuebenchDevice.deviceProblem(size, pointer);
    return problem ? problem.fix : "";
  }

  // ---------------------------------------------------------------- images
  const bitmaps = new Map();
  class ImageFailed extends Error {
    constructor(url, status) { super(`image ${url} could not be loaded`); this.url = url; this.status = status; }
  }
  /* An image as a bitmap. A 4xx other than 429 is final (the file is not there); a network error,
   * a 5xx or an undecodable body is tried IMAGE_ATTEMPTS times with back-off, then given up. */
  async function decode(url) {
    let status = null;
    for (let attempt = 1, wait = BACKOFF_MS.first; ; attempt++, wait = Math.min(wait * 2, BACKOFF_MS.max)) {
      try {
        const response = await fetch(url, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
        status = response.status;
        if (response.ok) return await createImageBitmap(await response.blob());
      } catch (err) { /* network error or undecodable image: try again */ }
      const final = status !== null && status >= 400 && status < 500 && status !== 429;
      if (final || attempt >= IMAGE_ATTEMPTS) throw new ImageFailed(url, status);
      statusEl.textContent = "loading images, retrying…";
      await sleep(wait);
    }
  }
  /* An image that cannot be loaded ends the session here: the server is told (once, without
   * retrying: it may be what fails) and the participant reads what happened and what to do. */
  async function stopForImage(failure) {
    statusEl.textContent = "";
    await requestJSON(`${C.api}/image-failed`, { method: "POST",
                                                body: JSON.stringify({ url: failure.url, status: failure.status }) })
      .catch(() => {});
    await showScreen("<h1>An image could not be loaded</h1><p>The study cannot go on without it. Your answers so " +
                     "far are kept. Please reload this page in a few minutes; if this message comes back, contact " +
                     "the researchers (the server has been told which image failed).</p>", "Reload the page",
                     "image-failed");
    window.location.reload();
    return new Promise(() => {}); // nothing runs on while the page reloads
  }
  /* Every image of a block is decoded before the block starts, so no trial waits on the network. */
  async function preloadBlock(trials) {
    state("loading");
    const urls = new Set();
    trials.forEach((t) => { t.images.forEach((u) => urls.add(u)); if (t.mask) urls.add(t.mask); });
    for (const [url, bitmap] of bitmaps) if (!urls.has(url)) { bitmap.close(); bitmaps.delete(url); }
    let done = 0;
    try {
      await Promise.all([...urls].filter((u) => !bitmaps.has(u)).map(async (u) => {
        bitmaps.set(u, await decode(u));
        statusEl.textContent = `loading ${++done}/${urls.size}`;
      }));
    } catch (err) {
      if (err instanceof ImageFailed) return stopForImage(err);
      throw err;
    }
    statusEl.textContent = "";
  }

  // ---------------------------------------------------------------- timed phases
  /* Show each phase from one rAF callback to the callback at which its planned frames
   * have elapsed (switching when at least frames - 0.5 periods have passed, so a late
   * callback ends a phase on the right vsync). Logs onset/offset, duration and frames. */
  async function runPhases(phases, hz, log) {
    const period = 1000 / hz;
    let t = await nextFrame();
    for (const phase of phases) {
      phase.draw();
      if (phase.onOnset) phase.onOnset(t);
      const onset = t;
      let last = t;
      let callbacks = 1;
      for (;;) {
        t = await nextFrame();
        if (t - last > DROPPED_FACTOR * period) log.dropped += 1;
        last = t;
        if (t - onset >= (phase.frames - 0.5) * period) break;
        callbacks += 1;
      }
      log.measured[phase.name] = t - onset;
      log.frames[phase.name] = Math.round((t - onset) / period);
      log.phases.push({ type: "phase", phase: phase.name, onset, offset: t, frames_planned: phase.frames,
                        frames: log.frames[phase.name], callbacks });
    }
    return t;
  }

  /* Resolves with {response, t} or null on timeout; answers arriving after the window are logged as late. */
  function answerWindow() {
    let resolve;
    const promise = new Promise((r) => { resolve = r; });
    const win = { open: true, start: null, ms: null, promise };
    win.answer = (response, t) => {
      if (!win.open) { logEvent("late_answer", { response }); return; }
      if (win.ms !== null && win.start !== null && t - win.start > win.ms) { logEvent("late_answer", { response }); return; }
      win.open = false;
      resolve({ response, t });
    };
    win.startClock = (start, ms) => {
      win.start = start;
      win.ms = ms;
      if (ms === null) return;
      (async () => {
        while (win.open) {
          const t = await nextFrame();
          if (win.open && t - start >= ms) { win.open = false; resolve(null); }
        }
      })();
    };
    return win;
  }

  /* The lab's response screen (human_tasks/layout.py): each label in its cell of the 4-column
   * grid, "not clear" below it across the middle two columns. */
  function showGrid(grid, win) {
    gridEl.innerHTML = "";
    grid.forEach(({ label, row, col }) => {
      const b = document.createElement("button");
      b.textContent = label;
      b.dataset.label = label;
      b.style.gridRow = String(row + 1);
      b.style.gridColumn = col === null ? "2 / span 2" : String(col + 1);
      if (col === null) b.className = "not-clear";
      b.addEventListener("click", (e) => win.answer(label, e.timeStamp));
      gridEl.appendChild(b);
    });
    gridEl.hidden = false;
  }

  /* How each trial type is shown and answered, one row per type (the lab runner's ResponseMode
   * table): onStimulus runs at stimulus onset, respond shows the response screen after the mask and
   * returns the time the response period began. */
  const TRIAL_TYPES = {
    classify: {
      numbered: false,
      onStimulus: (trial) => state("stimulus", trial.index),
      respond: (trial, win, t) => {
        clear();
        showGrid(trial.grid, win);
        state("response-grid", trial.index);
        if (!trial.timing.response_from_onset) win.startClock(t, trial.timing.response_window);
        return t;
      },
    },
    oddity: {  // keys 1/2/3 answer from stimulus onset
      numbered: true,
      onStimulus: (trial, win) => {
        state("response-keys", trial.index);
        keyHandler = (e) => { if (trial.choices.includes(e.key)) win.answer(e.key, e.timeStamp); };
      },
      respond: (trial, win, t, stimulusOnset) => {
        drawPrompt("Which image is different from the other two? Press 1, 2 or 3.");
        return stimulusOnset;
      },
    },
  };

  async function runTrial(trial, hz, device) {
    const mode = TRIAL_TYPES[trial.type];
    if (!mode) throw new Error(`trial ${trial.index + 1} has trial type "${trial.type}", which this task cannot show`);
    trialEvents = [];
    const log = { measured: {}, frames: {}, phases: [], dropped: 0 };
    const timing = trial.timing;
    if (trial.instruction) {
      const shown = performance.now();
      await showScreen(`<p id="instruction">${escapeHtml(trial.instruction)}</p>`, "Continue", "instruction");
      log.measured.instruction = performance.now() - shown;
    }
    const win = answerWindow();
    const images = trial.images.map((u) => bitmaps.get(u));
    const phases = [];
    if (timing.fixation) phases.push({ name: "fixation", frames: msToFrames(timing.fixation, hz), draw: drawFixation });
    let stimulusOnset = null;
    const onStimulus = (t) => {
      stimulusOnset = t;
      mode.onStimulus(trial, win);
      if (timing.response_from_onset) win.startClock(t, timing.response_window);
    };
    phases.push({ name: "stimulus", frames: msToFrames(timing.stimulus, hz),
                  draw: () => drawImages(images, mode.numbered), onOnset: onStimulus });
    if (trial.mask) phases.push({ name: "mask", frames: msToFrames(timing.mask, hz), draw: () => drawImages([bitmaps.get(trial.mask)], false) });
    const t = await runPhases(phases, hz, log);
    const responseOnset = mode.respond(trial, win, t, stimulusOnset);
    const answer = await win.promise;
    keyHandler = null;
    gridEl.hidden = true;
    const end = answer ? answer.t : performance.now();
    log.measured.response = end - responseOnset;
    const payload = {
      trial_key: trial.trial_key,
      response: answer ? answer.response : "",
      timed_out: !answer,
      rt_ms: answer ? Math.max(0, answer.t - responseOnset) : null,
      timing_measured: log.measured,
      frames: log.frames,
      dropped_frames: log.dropped,
      refresh_hz: hz,
      device,
      events: log.phases.concat(trialEvents),
    };
    const posted = trial.post ? postNow(trial, payload) : enqueue(trial.index, payload);
    if (trial.feedback != null) await showFeedback(trial, answer);
    state("iti", trial.index);
    if (timing.iti) await runPhases([{ name: "iti", frames: msToFrames(timing.iti, hz), draw: clear }], hz,
                                    { measured: {}, frames: {}, phases: [], dropped: 0 });
    await posted;
  }

  /* Adaptive (QUEST+) trials: the server chooses each next level from the answers stored so far,
   * so an answer is posted (and retried) before the next trial is asked for. */
  /* Practice trials say whether the answer was right (the same words as the lab runner's). */
  async function showFeedback(trial, answer) {
    const text = answer && answer.response === trial.feedback ? "Correct"
      : `Not quite: the answer was \u201c${trial.feedback}\u201d`;
    await showScreen(`<p id="feedback">${escapeHtml(text)}</p>`, null, "feedback");
    await new Promise((resolve) => setTimeout(resolve, FEEDBACK_MS));
    screenEl.hidden = true;
  }
  async function postNow(trial, payload) {
    const result = await withRetry(() => requestJSON(trial.post, { method: "POST", body: JSON.stringify(payload) }));
    if (!result.ok) refused.push({ index: trial.index, status: result.status, error: result.body.error });
    if (result.body.outcome) ended = result.body.outcome; // the server ended the session
    statusEl.textContent = "";
  }
  async function runAdaptive(plan, hz, device) {
    const fixed = plan.trials.filter((t) => !t.practice).length;
    for (let first = true; !refused.length && !ended; first = false) {
      const next = await withRetry(() => requestJSON(`${C.api}/adaptive`));
      if (!next.ok || next.body.done) return;
      if (first) await showScreen("<h1>Next part</h1><p>The images now get easier or harder depending on your " +
                                  "answers.</p>", "Continue", "adaptive");
      await preloadBlock([next.body.trial]);
      const before = plan.adaptive_trials.slice(0, next.body.block).reduce((a, b) => a + b, 0);
      const k = fixed + before + next.body.trial.index + 1, total = fixed + adaptiveTotal(plan);
      showProgress(`trial ${k} of ${total}`, k / total);
      await runTrial(next.body.trial, hz, device);
    }
  }

  // ---------------------------------------------------------------- the session
  async function finish() {
    state("saving");
    screenEl.innerHTML = "<p>Saving your answers…</p>";
    screenEl.hidden = false;
    for (;;) {
      await flush();
      const result = await withRetry(() => requestJSON(`${C.api}/complete`, { method: "POST", body: "{}" }));
      if (result.ok) return showOutcome(result.body);
      if (!Object.keys(queue).length && refused.length) {
        return showScreen(`<h1>Some answers could not be saved</h1><p>Please contact the researchers and quote ` +
                          `${escapeHtml(JSON.stringify(refused.slice(0, 3)))}.</p>`, null, "error");
      }
      await sleep(BACKOFF_MS.first);
    }
  }

  /* The most answers the adaptive (QUEST+) blocks after the fixed trials may ask for. */
  function adaptiveTotal(plan) {
    return (plan.adaptive_trials || []).reduce((a, b) => a + b, 0);
  }

  /* ["trial k of n · block b of B", k / n] (practice counted apart; n includes the adaptive trials that
   * follow), so people know how far they are. */
  function progressText(plan, i) {
    const trials = plan.trials, trial = trials[i];
    const same = trials.filter((t) => t.practice === trial.practice);
    const k = same.indexOf(trial) + 1;
    if (trial.practice) return [`practice ${k} of ${same.length}`, k / same.length];
    const blocks = [...new Set(same.map((t) => t.block))];
    const block = blocks.length > 1 ? ` · block ${blocks.indexOf(trial.block) + 1} of ${blocks.length}` : "";
    const total = same.length + adaptiveTotal(plan);
    return [`trial ${k} of ${total}${block}`, k / total];
  }

  async function main() {
    const planResult = await withRetry(() => requestJSON(C.api));
    if (!planResult.ok) return showScreen(`<h1>This link does not work</h1><p>${escapeHtml(planResult.body.error || "")}</p>`, null, "error");
    const plan = planResult.body;
    texts = plan.texts || {};
    if (plan.status !== "in_progress") return showOutcome(plan.outcome);
    flush();
    const done = new Set(plan.answered.concat(Object.keys(queue).map(Number)));
    const found = plan.trials.findIndex((t) => !done.has(t.index));
    const adaptiveLeft = !(await withRetry(() => requestJSON(`${C.api}/adaptive`))).body.done;
    if (found < 0 && !adaptiveLeft) { // everything answered before a reload: only the questions and the code are missing
      if (plan.questionnaire) await askQuestionnaire(plan.questionnaire);
      return finish();
    }
    const start = found < 0 ? plan.trials.length : found;
    const resumed = done.size > 0;
    const check = await browserCheck(); // before the instructions: nobody reads them on a device that fails
    const device = { user_agent: navigator.userAgent, platform: navigator.platform, dpr: window.devicePixelRatio,
                     refresh: check.refresh, size: check.size };
    if (!check.ok) {
      const result = await withRetry(() => requestJSON(`${C.api}/screen`,
        { method: "POST", body: JSON.stringify({ reason: check.reason, refresh: check.refresh, size: check.size,
                                                 pointer: check.pointer }) })); // the server judges them again
      return showOutcome(result.body);
    }
    await showScreen(resumed ? "<h1>Welcome back</h1><p>You continue where you left off.</p>"
                             : `<div id="instructions-text">${texts.instructions}</div>`, "Continue", "instructions");
    const hz = check.refresh.hz;
    if (plan.display) {
      let calibration = plan.calibration;
      if (!calibration) {
        calibration = await calibrate(plan.display, Math.max(1, ...plan.trials.map((t) => t.images.length)));
        const posted = await withRetry(() => requestJSON(`${C.api}/calibration`,
                                                         { method: "POST", body: JSON.stringify(calibration) }));
        if (posted.ok) calibration = posted.body.calibration; // a reload keeps the first calibration
      }
      imageCssPx = calibration.stimulus_css_px;
      Object.assign(device, { stimulus_degrees: plan.display.stimulus_degrees, stimulus_css_px: imageCssPx,
                              px_per_mm: calibration.px_per_mm, viewing_distance_cm: calibration.viewing_distance_cm,
                              distance_method: calibration.method === "card+blind-spot" ? "blind-spot" : "entered" });
    }
    await showScreen("<p>The study runs in fullscreen. Click to switch to fullscreen and begin.</p>",
                     "Fullscreen and start", "fullscreen");
    for (let i = start; i < plan.trials.length; i++) {
      const trial = plan.trials[i];
      if (done.has(trial.index)) continue;
      const previous = plan.trials[i - 1];
      const newBlock = i === start || trial.block !== previous.block;
      if (i !== start && previous.practice && !trial.practice) {
        await showScreen("<h1>Practice over</h1><p>The main part starts now.</p>", "Continue", "break");
      } else if (i !== start && trial.break_before) {
        await showScreen("<h1>Break</h1><p>Rest your eyes for a moment, then continue.</p>", "Continue", "break");
      }
      if (newBlock) await preloadBlock(plan.trials.filter((t) => t.index >= i && t.block === trial.block));
      showProgress(...progressText(plan, i));
      await runTrial(trial, hz, device);
      if (trial.instruction) await flush(); // an attention trial's answer may end the session
      if (ended) return showOutcome(ended); // the server ended the session early
    }
    await runAdaptive(plan, hz, device);
    if (ended) return showOutcome(ended); // the server ended the session early
    if (plan.questionnaire) await askQuestionnaire(plan.questionnaire);
    await finish();
  }

  window.cuebenchTask = { msToFrames, judgeCheck, CHECK, stimulusSize, imageSize: () => imageCssPx };
  main();
})();

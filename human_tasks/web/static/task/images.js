/* The images of a block, fetched and decoded before it starts, so no trial waits on the network. */
import { showScreen, sleep, state, statusEl } from "./dom.js";
import { BACKOFF_MS, REQUEST_TIMEOUT_MS, api, requestJSON } from "./server.js";
import { say } from "./words.js";

const IMAGE_ATTEMPTS = 5; // an image still failing after 5 tries (about 8 s of back-off) stops the session
export const bitmaps = new Map();

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
    statusEl.textContent = say("loading_retry");
    await sleep(wait);
  }
}
/* An image that cannot be loaded ends the session here: the server is told (once, without
 * retrying: it may be what fails) and the participant reads what happened and what to do. */
async function stopForImage(failure) {
  statusEl.textContent = "";
  await requestJSON(`${api}/image-failed`, { method: "POST",
                                            body: JSON.stringify({ url: failure.url, status: failure.status }) })
    .catch(() => {});
  await showScreen(`<h1>${say("image_failed_title")}</h1><p>${say("image_failed")}</p>`, say("image_failed_button"),
                   "image-failed");
  window.location.reload();
  return new Promise(() => {}); // nothing runs on while the page reloads
}
/* Every image of a block is decoded before the block starts, so no trial waits on the network. */
export async function preloadBlock(trials) {
  state("loading");
  const urls = new Set();
  trials.forEach((t) => { t.images.forEach((u) => urls.add(u)); if (t.mask) urls.add(t.mask); });
  for (const [url, bitmap] of bitmaps) if (!urls.has(url)) { bitmap.close(); bitmaps.delete(url); }
  let done = 0;
  try {
    await Promise.all([...urls].filter((u) => !bitmaps.has(u)).map(async (u) => {
      bitmaps.set(u, await decode(u));
      statusEl.textContent = say("loading", { done: ++done, total: urls.size });
    }));
  } catch (err) {
    if (err instanceof ImageFailed) return stopForImage(err);
    throw err;
  }
  statusEl.textContent = "";
}

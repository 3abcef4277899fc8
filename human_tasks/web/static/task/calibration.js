/* Screen calibration: where the experiment sets the image size in degrees of visual angle, the person
 * matches an on-screen card to a real one (pixels per mm, as jsPsych's virtual-chinrest does) and gives
 * the viewing distance, typed or measured from the blind spot; the image is then 2 d tan(deg / 2) wide,
 * capped to fit the window. */
import { VIEWING_DISTANCE_CM } from "./constants.js";
import { $, escapeHtml, keys, screenEl, sleep, state } from "./dom.js";
import { IMAGE_GAP_CSS_PX } from "./display.js";
import { say } from "./words.js";

const CARD_MM = { width: 85.6, height: 53.98 }; // ISO/IEC 7810 ID-1: a credit, bank or ID card
const CARD_DEFAULT_CSS_PX = 323; // the card's width at 96 CSS px per inch
const [MIN_CM, MAX_CM] = VIEWING_DISTANCE_CM;
const takenDistance = (cm) => Number.isFinite(cm) && cm >= MIN_CM && cm <= MAX_CM;

export function stimulusSize(display, pxPerMm, distanceCm, maxImages) {
  const wanted = 2 * distanceCm * 10 * Math.tan((display.stimulus_degrees * Math.PI) / 360) * pxPerMm;
  const room = Math.min((window.innerWidth - 80 - (maxImages - 1) * IMAGE_GAP_CSS_PX) / maxImages,
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
      if (x < BLIND_SPOT.dotCssPx) { keys.handler = null; dot.hidden = true; resolve(null); return; }
      mm = next;
      dot.style.left = `${x - BLIND_SPOT.dotCssPx / 2}px`;
      dot.dataset.mm = String(mm);
      dot.hidden = false;
      frame = requestAnimationFrame(travel);
    };
    keys.handler = (e) => {
      if (e.code !== "Space") return;
      e.preventDefault();
      cancelAnimationFrame(frame);
      keys.handler = null;
      dot.hidden = true;
      resolve(mm);
    };
    frame = requestAnimationFrame(travel);
  });
}

async function measureBlindSpot(display, pxPerMm) {
  state("blind-spot");
  screenEl.innerHTML =
    `<h1>${say("blind_spot_title")}</h1><p>${say("blind_spot")}</p>` +
    `<p id="blind-spot-count">${say("blind_spot_start", { n: BLIND_SPOT.sweeps })}</p>` +
    '<div id="blind-spot-square" class="blind-spot-square"></div><div id="blind-spot-dot" class="blind-spot-dot" hidden></div>';
  screenEl.hidden = false;
  const count = $("blind-spot-count"), square = $("blind-spot-square"), dot = $("blind-spot-dot");
  Object.assign(square.style, { width: `${BLIND_SPOT.squareCssPx}px`, height: `${BLIND_SPOT.squareCssPx}px` });
  Object.assign(dot.style, { width: `${BLIND_SPOT.dotCssPx}px`, height: `${BLIND_SPOT.dotCssPx}px` });
  square.style.left = `${blindSpotSquareX() - BLIND_SPOT.squareCssPx / 2}px`;
  await new Promise((resolve) => {
    keys.handler = (e) => { if (e.code === "Space") { e.preventDefault(); keys.handler = null; resolve(); } };
  });
  const sweeps = [];
  for (let tries = 0; sweeps.length < BLIND_SPOT.sweeps && tries < BLIND_SPOT.maxTries; tries++) {
    count.textContent = say("blind_spot_dot", { k: sweeps.length + 1, n: BLIND_SPOT.sweeps });
    const mm = await blindSpotSweep(pxPerMm, dot);
    if (mm !== null) sweeps.push(mm);
    await sleep(BLIND_SPOT.pauseMs);
  }
  screenEl.hidden = true;
  if (sweeps.length < BLIND_SPOT.sweeps) return null;
  const mean = sweeps.reduce((a, b) => a + b, 0) / sweeps.length;
  const distance = mean / Math.tan((display.blind_spot_degrees * Math.PI) / 180) / 10;
  return takenDistance(distance) ? { sweeps, distance } : null;
}

function calibrationPage(display, cardPx, distance, note) {
  state("calibration");
  screenEl.innerHTML =
    `<h1>${say("screen_size_title")}</h1><p>${say("screen_size")}</p>` +
    `<div id="card" class="card"></div><p><input id="card-size" type="range" min="100" max="900" step="1" ` +
    `value="${cardPx}" aria-label="${say("card_width")}"></p>` +
    `<p><label>${say("distance")} <input id="distance" type="number" min="${MIN_CM}" max="${MAX_CM}" ` +
    `step="0.1" value="${distance}"> ${say("distance_unit")}</label> ` +
    `<button id="measure-distance" type="button">${say("measure_distance")}</button></p>` +
    `<p>${say("sit_at", { cm: display.viewing_distance_cm })}</p>` +
    `<p class="error" id="calibration-error">${escapeHtml(note)}</p><p><button id="continue">${say("continue")}</button></p>`;
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

export async function calibrate(display, maxImages) {
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
      note = measured ? "" : say("distance_not_measured");
      continue;
    }
    const fromBlindSpot = measured !== null && page.typed === measured.distance.toFixed(1);
    if (fromBlindSpot && cardPx !== measured.cardPx) { // the dot's mm were counted on the old card size
      measured = null;
      shown = "";
      note = say("distance_card_changed");
      continue;
    }
    const distance = fromBlindSpot ? measured.distance : Number(page.typed);
    if (takenDistance(distance)) {
      const size = stimulusSize(display, pxPerMm, distance, maxImages);
      screenEl.hidden = true;
      return { px_per_mm: pxPerMm, viewing_distance_cm: distance, stimulus_css_px: size.px, capped: size.capped,
               device_pixel_ratio: window.devicePixelRatio || 1, card_moved: cardMoved,
               ...(fromBlindSpot ? { method: "card+blind-spot", blind_spot_mm: measured.sweeps }
                 : { method: "card+entered-distance" }) };
    }
    shown = page.typed;
    note = say("distance_range", { min: MIN_CM, max: MAX_CM });
  }
}

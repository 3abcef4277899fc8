/* The canvas the trials are drawn on (mid-grey): fixation cross, the images side by side, a prompt. */
import { $ } from "./dom.js";

const canvas = $("stage");
const ctx = canvas.getContext("2d");
export const IMAGE_CSS_PX = 224; // without a size in degrees: the images' own 224 px, in CSS pixels
export const IMAGE_GAP_CSS_PX = 40;

/* The width each image is drawn at, in CSS px (the calibration sets it from the degrees of visual angle). */
export const image = { cssPx: IMAGE_CSS_PX };

function fitCanvas() {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(window.innerWidth * dpr);
  canvas.height = Math.round(window.innerHeight * dpr);
}
window.addEventListener("resize", fitCanvas);
fitCanvas();

export function clear() {
  ctx.fillStyle = "#808080";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
}
export function drawFixation() {
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
export function drawImages(bitmaps, numbered) {
  clear();
  const dpr = window.devicePixelRatio || 1;
  const size = image.cssPx * dpr, gap = IMAGE_GAP_CSS_PX * dpr;
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
export function drawPrompt(text) {
  clear();
  const dpr = window.devicePixelRatio || 1;
  ctx.fillStyle = "#fff";
  ctx.font = `${22 * dpr}px system-ui, sans-serif`;
  ctx.textAlign = "center";
  ctx.fillText(text, canvas.width / 2, canvas.height / 2);
}

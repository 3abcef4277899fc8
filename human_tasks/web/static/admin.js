/* The admin page's live data-quality panel: fetches the JSON of this page's participants
 * (/admin/quality.json?page=N) now and every POLL_MS, and fills #quality. */
(function () {
  "use strict";
  const POLL_MS = 10000;
  const table = document.getElementById("quality");
  if (!table) return;
  const ratio = ([right, answered]) => (answered ? `${right} / ${answered}` : "");
  const cell = (text) => { const td = document.createElement("td"); td.textContent = text; return td; };

  function fill(body) {
    const rows = body.people.map((p) => {
      const tr = document.createElement("tr");
      tr.dataset.code = p.code;
      if (p.flags.length) tr.className = "flagged";
      [p.code, p.group, p.status.replace(/_/g, " "), p.trials, ratio(p.catch), ratio(p.attention),
       p.median_rt_ms === null ? "" : `${p.median_rt_ms} ms`,
       p.dropped_frames ? `${p.dropped_frames} (${p.trials_dropping} trials)` : "0", p.fullscreen_exits,
       p.calibration, p.flags.join("; ")].forEach((value) => tr.appendChild(cell(String(value))));
      return tr;
    });
    table.tBodies[0].replaceChildren(...rows);
    document.getElementById("flagged").textContent =
      `${body.flagged} of ${body.total} participants are excluded or marked for review.`;
    table.dataset.updated = String(Date.now());
  }

  async function poll() {
    try {
      const reply = await fetch(table.dataset.url, { headers: { Accept: "application/json" } });
      if (reply.ok) fill(await reply.json());
    } catch (err) { /* the next poll tries again */ }
    setTimeout(poll, POLL_MS);
  }
  poll();
})();

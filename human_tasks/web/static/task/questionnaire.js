/* The study's own questions (EXPDIR/texts/questionnaire.json), after the last trial; the server
 * checks the answers against the same declaration and names any problem, shown here. */
import { $, escapeHtml, screenEl, state } from "./dom.js";
import { showProgress } from "./progress.js";
import { api, postJSON } from "./server.js";
import { say } from "./words.js";

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

/* While the answers are on their way the form is locked and the page says so ("questionnaire-sending"):
 * a second click or an edit then can neither post twice nor change what was sent. */
async function sending(post) {
  const fields = [...screenEl.querySelectorAll("#questionnaire input, #questionnaire textarea, #continue")];
  const lock = (locked) => fields.forEach((field) => { field.disabled = locked; });
  lock(true);
  state("questionnaire-sending");
  const result = await post(); // retried until the server answers (server.js)
  if (!result.ok) { // refused: the participant corrects the answer the server named
    state("questionnaire");
    lock(false);
  }
  return result;
}

export async function askQuestionnaire(questions) {
  showProgress("", 0);
  state("questionnaire");
  screenEl.innerHTML = `<h1>${say("questions_title")}</h1><form id="questionnaire">${questions.map(questionHtml).join("")}` +
    `</form><p class="error" id="questionnaire-error"></p><p><button id="continue">${say("questions_submit")}</button></p>`;
  screenEl.hidden = false;
  for (;;) {
    await new Promise((resolve) => $("continue").addEventListener("click", resolve, { once: true }));
    const answers = questionnaireAnswers(questions);
    const missing = questions.filter((q) => q.required && !(q.id in answers));
    if (missing.length) {
      $("questionnaire-error").textContent = say("questions_missing", { missing: missing.map((q) => q.prompt).join("; ") });
      continue;
    }
    const result = await sending(() => postJSON(`${api}/questionnaire`, answers));
    if (result.ok) { screenEl.hidden = true; return; }
    const unfit = questions.find((q) => q.id === (result.body && result.body.question));
    $("questionnaire-error").textContent = unfit ? say("questions_invalid", { question: unfit.prompt })
      : say("questions_not_saved", { status: result.status });
  }
}

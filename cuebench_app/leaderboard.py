"""``cuebench leaderboard SCORECARDS... --out site/``: a static site built from any number of scorecards
(``cuebench benchmark``): one sortable table with each score's 95 % interval drawn as an error bar, one page per
benchmark with its figure and references, and per row the provenance a reader needs to reproduce the number
(package version and commit, the command with every option, benchmark version, stimulus and image-list hashes,
decision rule, weights). ``cuebench leaderboard verify SCORECARD`` re-runs a scorecard's command for its model and
says, metric by metric, whether the re-run falls inside the published interval (Brain-Score's submission check,
done locally).

The site is plain HTML, inline SVG and a few lines of JavaScript: it opens from the file system and serves
from any static host.
"""

from __future__ import annotations

import argparse
import html
import json
import shlex
from pathlib import Path

from cuebench.errors import CuebenchError
from cuebench.paths import user_path

BAR_WIDTH, BAR_HEIGHT = 120, 16

SORT_SCRIPT = """
document.querySelectorAll('table.sortable th[data-col]').forEach(th => th.addEventListener('click', () => {
  const table = th.closest('table'), body = table.tBodies[0], col = +th.dataset.col;
  const down = th.getAttribute('aria-sort') !== 'descending';
  table.querySelectorAll('th').forEach(h => h.removeAttribute('aria-sort'));
  th.setAttribute('aria-sort', down ? 'descending' : 'ascending');
  const key = row => { const v = row.cells[col].dataset.value; return v === '' ? -Infinity : (isNaN(+v) ? v : +v); };
  [...body.rows].sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (down ? -1 : 1))
    .forEach(row => body.appendChild(row));
}));
"""

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse}
th,td{padding:.3em .6em;border-bottom:1px solid #ddd;text-align:left;vertical-align:middle}
th[data-col]{cursor:pointer}th[aria-sort=descending]::after{content:' \\25BC'}th[aria-sort=ascending]::after{content:' \\25B2'}
.num{font-variant-numeric:tabular-nums}small{color:#555}small.note{display:block;max-width:22em;font-size:.75em}"""


def register(sub) -> None:
    parser = sub.add_parser("leaderboard", help="a static site from scorecards: sortable table, error bars; "
                                                "`leaderboard verify SCORECARD` re-runs one and checks it",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scorecards", nargs="+", type=user_path, metavar="SCORECARD",
                        help="scorecard JSON files (or folders of them) written by `cuebench benchmark`; "
                             "`verify SCORECARD`: re-run that scorecard's benchmarks and check each metric")
    parser.add_argument("--out", type=user_path, default="site", help="folder to write the site into")
    verify = parser.add_argument_group("verify")
    verify.add_argument("--cache", type=user_path, default=None,
                        help="where the re-run builds and answers (default: a new temporary folder, so nothing of "
                             "the original run is reused)")
    verify.add_argument("--shared", type=user_path, default=None,
                        help="the shared data folder (default: $CUEBENCH_SHARED or ../shared)")
    verify.add_argument("--device", default=None, help="auto, cpu or cuda (default: the scorecard's)")
    verify.add_argument("--batch-size", type=int, default=None, help="images per forward pass (default 64)")
    parser.set_defaults(func=run)


VERIFY_ONLY = ("cache", "shared", "device", "batch_size")
"""Options that only a re-run uses: given to the site builder they would do nothing, so they are refused."""


def run(args) -> int:
    if args.scorecards[0] == user_path("verify") and not args.scorecards[0].exists():
        from .verify import run_verify

        if args.out != user_path("site"):
            raise CuebenchError("--out builds a site; `leaderboard verify` writes nothing (it re-runs in --cache)")
        return run_verify(args.scorecards[1:], args)
    if given := [f"--{name.replace('_', '-')}" for name in VERIFY_ONLY if getattr(args, name) is not None]:
        raise CuebenchError(f"{', '.join(given)}: only `cuebench leaderboard verify SCORECARD` uses "
                            f"{'it' if len(given) == 1 else 'them'}; building a site from scorecards runs nothing")
    cards = read_scorecards(args.scorecards)
    index = write_site(cards, args.out)
    print(f"leaderboard: {index} ({len(cards)} models)")
    return 0


def read_scorecards(paths: list[Path]) -> list[dict]:
    files = [(f, p.is_dir()) for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    cards = []
    for path, in_folder in files:
        try:
            card = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise CuebenchError(f"{path}: not a readable scorecard ({err})") from err
        if not isinstance(card, dict) or not {"model", "metrics", "benchmarks"} <= set(card):
            if in_folder:
                continue  # compare files and other JSON beside the scorecards
            raise CuebenchError(f"{path}: not a scorecard (JSON with model, metrics, benchmarks)")
        cards.append(card)
    if not cards:
        raise CuebenchError(f"no scorecards (JSON with model, metrics, benchmarks) in {', '.join(map(str, paths))}")
    return cards


def columns(cards: list[dict]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((m["benchmark"], m["metric"]) for c in cards for m in c["metrics"]))


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def error_bar(metric: dict | None, low: float, high: float) -> str:
    """An inline SVG: the interval as a line with end ticks, the score as a dot, the people as a red tick."""
    if not metric or metric.get("value") is None:
        return ""
    span = (high - low) or 1.0

    def x(v):
        return 4 + (BAR_WIDTH - 8) * (v - low) / span
    lo = metric["ci_low"] if metric["ci_low"] is not None else metric["value"]
    hi = metric["ci_high"] if metric["ci_high"] is not None else metric["value"]
    y = BAR_HEIGHT / 2
    parts = [f'<line class="ci" x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="{y}" y2="{y}" stroke="#333"/>',
             f'<line x1="{x(lo):.1f}" x2="{x(lo):.1f}" y1="3" y2="13" stroke="#333"/>',
             f'<line x1="{x(hi):.1f}" x2="{x(hi):.1f}" y1="3" y2="13" stroke="#333"/>',
             f'<circle class="score" cx="{x(metric["value"]):.1f}" cy="{y}" r="3.5" fill="#1f5fa8"/>']
    if metric.get("human") is not None:
        parts.append(f'<line class="human" x1="{x(metric["human"]):.1f}" x2="{x(metric["human"]):.1f}" y1="0" '
                     f'y2="{BAR_HEIGHT}" stroke="#c0392b" stroke-width="2"/>')
    label = f"{metric['value']:.3f} [{lo:.3f}, {hi:.3f}]"
    return (f'<svg class="errorbar" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" role="img" aria-label="{label}">'
            f'<title>{label}</title>{"".join(parts)}</svg>')


def scale(metrics: list[dict | None]) -> tuple[float, float]:
    values = [v for m in metrics if m for v in (m.get("ci_low"), m.get("ci_high"), m.get("value"), m.get("human"))
              if v is not None]
    return (min(values), max(values)) if values else (0.0, 1.0)


def lookup(card: dict, key: tuple[str, str]) -> dict | None:
    return next((m for m in card["metrics"] if (m["benchmark"], m["metric"]) == key), None)


def page(title: str, body: str, root: str = "") -> str:
    return (f"<!doctype html><html lang='en'><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style><body><nav><a href='{root}index.html'>leaderboard</a></nav>"
            f"<h1>{html.escape(title)}</h1>{body}<script>{SORT_SCRIPT}</script></body></html>\n")


def write_site(cards: list[dict], out: Path) -> Path:
    from .benchmark import file_stem

    out.mkdir(parents=True, exist_ok=True)
    (out / "benchmarks").mkdir(exist_ok=True)
    (out / "provenance").mkdir(exist_ok=True)
    keys = columns(cards)
    scales = {k: scale([lookup(c, k) for c in cards]) for k in keys}
    # headers hold text only: a click anywhere on one sorts (the benchmark pages are linked above the table)
    head = "<th data-col='0'>model</th>" + "".join(
        f"<th data-col='{i + 1}'>{html.escape(b)}<br>{html.escape(m)}</th>" for i, (b, m) in enumerate(keys)
    ) + f"<th data-col='{len(keys) + 1}'>provenance</th>"
    rows = []
    for card, stem in zip(cards, provenance_stems(cards)):
        options = ""
        if stem != file_stem(card["model"]):   # the model has several scorecards here: say which run this row is
            options = f"<br><small class='options'>{html.escape(run_options(card))}</small>"
        cells = [f"<td data-value='{html.escape(card['model'])}'>{html.escape(card['model'])}{options}</td>"]
        for key in keys:
            metric = lookup(card, key)
            value = "" if not metric or metric["value"] is None else f"{metric['value']:.6g}"
            text = "–" if not value else f"{metric['value']:.3f}"
            notes = "".join(f"<small class='note'>{html.escape(n)}</small>" for n in (metric or {}).get("notes", []))
            cells.append(f"<td class='num' data-value='{value}'>{text} {error_bar(metric, *scales[key])}{notes}</td>")
        made = f"{card['package_version']} {card.get('commit') or ''}".strip()
        cells.append(f"<td data-value='{html.escape(made)}'><a class='provenance' href='provenance/{stem}.html'>"
                     f"cuebench {html.escape(made[:len(card['package_version']) + 13])}</a></td>")
        rows.append(f"<tr data-model='{html.escape(card['model'])}'>" + "".join(cells) + "</tr>")
        (out / "provenance" / f"{stem}.html").write_text(provenance_page(card))
    links = " · ".join(f"<a href='benchmarks/{slug(b)}.html'>{html.escape(b)}</a>" for b in dict.fromkeys(b for b, _ in keys))
    body = (f"<p class='benchmarks'>Benchmarks: {links}</p>"
            "<p>Each cell: the score, and its 95 % interval as an error bar (dot: score; red tick: the published "
            "human value, drawn only where the run measured what the people's study measured), with the notes a "
            "reader needs before trusting it. Click a column header to sort.</p>"
            f"<table class='sortable' id='leaderboard'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}"
            "</tbody></table>")
    index = out / "index.html"
    index.write_text(page("cuebench leaderboard", body))
    for bench in dict.fromkeys(b for b, _ in keys):
        (out / "benchmarks" / f"{slug(bench)}.html").write_text(benchmark_page(bench, cards, keys))
    return index


def provenance_stems(cards: list[dict]) -> list[str]:
    """One provenance file name per scorecard: the model's (``benchmark.file_stem``), and where one model has
    several scorecards (runs with other options) a number after a dot, which no model's own stem contains."""
    from .benchmark import file_stem

    stems = [file_stem(card["model"]) for card in cards]
    return [stem if stems.count(stem) == 1 else f"{stem}.{stems[:i + 1].count(stem)}" for i, stem in enumerate(stems)]


def run_options(card: dict) -> str:
    """The options of the scorecard's reproduce line (what follows the model)."""
    return card.get("reproduce", "").partition(shlex.quote(card["model"]))[2].strip()


def provenance_page(card: dict) -> str:
    header = ["benchmark", "package version", "benchmark version", "stimulus sha256", "images", "image list sha256",
              "decision rule", "weights", "observer", "trials"]
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            b["benchmark"], card["package_version"], b["benchmark_version"], b["stimulus_hash"], b.get("images", "–"),
            b.get("image_list_hash", "–"), ", ".join(b["decision_rule"]), b["weights"], b["observer"], b["trials"]))
        + "</tr>" for b in card["benchmarks"])
    commit = card.get("commit") or "not recorded"
    reproduce = card.get("reproduce") or f"cuebench benchmark {card['model']} (options not recorded)"
    body = (f"<p>Scorecard made {html.escape(card['created'])} by cuebench {html.escape(card['package_version'])}, "
            f"commit <code class='commit'>{html.escape(commit)}</code>. To reproduce every row, install that version "
            f"(or check out that commit) and run:</p><pre class='reproduce'>{html.escape(reproduce)}</pre>"
            "<p>The benchmark version is the stimulus hash's first 12 digits; <code>cuebench leaderboard verify "
            "SCORECARD</code> re-runs the command and checks every number against its interval.</p>"
            "<table id='provenance'><thead><tr>" + "".join(f"<th>{h}</th>" for h in header)
            + f"</tr></thead><tbody>{rows}</tbody></table>")
    return page(f"Provenance: {card['model']}", body, root="../")


def figure(metric_key: tuple[str, str], cards: list[dict]) -> str:
    """An SVG: one row per model (score and interval), the published human value as a red tick on each row whose
    run measured what the people's study measured (and on no other)."""
    found = [(c["model"], lookup(c, metric_key)) for c in cards]
    found = [(name, m) for name, m in found if m and m["value"] is not None]
    if not found:
        return ""
    low, high = scale([m for _, m in found])
    width, left, row = 520, 180, 22
    height = row * (len(found) + 2)

    def x(v):
        return left + (width - left - 60) * (v - low) / ((high - low) or 1.0)
    parts = []
    for i, (name, m) in enumerate(found):
        y = row * (i + 1)
        lo = m["ci_low"] if m["ci_low"] is not None else m["value"]
        hi = m["ci_high"] if m["ci_high"] is not None else m["value"]
        parts.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end" font-size="12">{html.escape(name)}</text>'
                     f'<line x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="{y}" y2="{y}" stroke="#333"/>'
                     f'<circle cx="{x(m["value"]):.1f}" cy="{y}" r="4" fill="#1f5fa8"/>')
        if m.get("human") is not None:
            parts.append(f'<line class="human" x1="{x(m["human"]):.1f}" x2="{x(m["human"]):.1f}" y1="{y - 8}" '
                         f'y2="{y + 8}" stroke="#c0392b" stroke-width="2"/>')
    if humans := [m["human"] for _, m in found if m.get("human") is not None]:
        parts.append(f'<text x="{x(humans[0]) + 4:.1f}" y="12" font-size="11" fill="#c0392b">people</text>')
    axis = height - row / 2
    parts.append(f'<text x="{left}" y="{axis + 4}" font-size="11">{low:.3f}</text>'
                 f'<text x="{x(high):.1f}" y="{axis + 4}" font-size="11" text-anchor="end">{high:.3f}</text>')
    return (f'<svg class="figure" width="{width}" height="{height}" role="img" '
            f'aria-label="{html.escape(metric_key[1])} per model">{"".join(parts)}</svg>')


def sources_table(cards: list[dict], key: tuple[str, str]) -> str:
    """Per published source of one metric: what it measured, and which models are ranked among its models (the
    run measured what it measured) or see it for context only, with the sentence saying why."""
    found = [(c["model"], source) for c in cards if (m := lookup(c, key)) for source in m.get("sources", [])]
    if not found:
        return ""
    rows = []
    for citation in dict.fromkeys(source["citation"] for _, source in found):
        mine = [(model, source) for model, source in found if source["citation"] == citation]
        source = mine[0][1]
        images = "not stated" if source["images"] is None else f"{source['images']:,}"
        listed = (source["image_list_hash"] or "not distributed")[:12] if source["images"] is not None else "–"
        ranked = ", ".join(model for model, s in mine if s["ranked"]) or "–"
        why = "".join(f"<li><b>{html.escape(model)}</b>: {html.escape(s['not_ranked_because'])}</li>"
                      for model, s in mine if s["not_ranked_because"])
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            citation, source["measured_on"], images, listed, source["decision_rule"] or "not stated",
            source["models"], ranked)) + f"<td><ul>{why}</ul></td></tr>")
    header = ("source", "measured on", "images", "image list", "decision rule", "models", "ranked here",
              "shown for context only, because")
    return ("<h3>Published sources</h3><table class='sources'><thead><tr>"
            + "".join(f"<th>{h}</th>" for h in header) + f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def benchmark_page(bench: str, cards: list[dict], keys: list[tuple[str, str]]) -> str:
    from analysis import reference

    sections = []
    for key in (k for k in keys if k[0] == bench):
        metrics = [m for c in cards if (m := lookup(c, key))]
        description = html.escape(metrics[0]["description"]) if metrics else ""
        refs = {r["id"]: r for m in metrics for r in m["references"]}
        items = "".join(
            f"<li>{html.escape(entry.authors)} ({entry.year}), <em>{html.escape(entry.title)}</em>, "
            f"{html.escape(entry.table)}; {html.escape(entry.units)}; data version {entry.version}"
            f"{'; ' + html.escape(entry.notes) if entry.notes else ''}</li>"
            for entry in (reference.reference(r) for r in refs))
        notes = "".join(f"<li><b>{html.escape(c['model'])}</b>: {html.escape(n)}</li>" for c in cards
                        for m in [lookup(c, key)] if m for n in m["notes"])
        sections.append(f"<h2>{html.escape(key[1])}</h2><p>{description}</p>{figure(key, cards)}"
                        f"<h3>References</h3><ul class='references'>{items or '<li>none published</li>'}</ul>"
                        f"{sources_table(cards, key)}" + (f"<h3>Notes</h3><ul>{notes}</ul>" if notes else ""))
    return page(f"Benchmark: {bench}", "".join(sections), root="../")

"""``cuebench leaderboard``: the static site lists every model with error bars and its notes, sorts by every
column in a real browser, links each benchmark to its page with figure and references, and gives each model its
own provenance page with the command (every option), package version and commit that reproduce it."""

from __future__ import annotations

import json

from cuebench_app.cli import main

COMMAND = {"benchmarks": ["cue-conflict", "dist"], "per_class": 2, "eed_steps": 64, "device": "cpu"}


def scorecard(model: str, shape_bias: float, dist: float) -> dict:
    """A scorecard as ``cuebench benchmark`` writes it (two benchmarks, one metric each)."""
    def metric(bench, name, value, human, ref):
        return {"benchmark": bench, "metric": name, "description": f"{name} description", "value": value,
                "ci_low": value - 0.05, "ci_high": value + 0.04, "trials": 80, "images": {"all": 80},
                "counts": {"all": [value * 80, 80]}, "comparable": True, "not_ranked_because": None, "human": human,
                "human_label": "", "human_range": None, "references": [{"id": ref, "label": "x", "version": 1}],
                "published_models": 5, "rank": 2, "rank_range": [1, 4],
                "notes": [f"too small to rank: {model} spans ranks 1-4 of 6"], "benchmark_version": "abc123def456",
                "observer": f"{model}:pypi", "sources": [
                    {"citation": "Source A", "references": [ref], "measured_on": "set A", "images": 80,
                     "image_list_hash": "feed" * 16, "decision_rule": "16class-mean", "models": 5, "human": human,
                     "ranked": True, "rank": 2, "not_ranked_because": None},
                    {"citation": "Source B", "references": ["heinert_table8"], "measured_on": "a set not named",
                     "images": None, "image_list_hash": None, "decision_rule": None, "models": 43, "human": None,
                     "ranked": False, "rank": None, "not_ranked_because": "the paper states neither"}],
                "context": ["Source B: 43 models, shown for context and not ranked: the paper states neither."]}
    reproduce = (f"cuebench benchmark {model} --benchmarks cue-conflict,dist --per-class 2 --eed-steps 64 "
                 "--device cpu")
    return {"model": model, "package_version": "0.1.0", "commit": "0123456789abcdef" * 2 + "01234567",
            "created": "2026-01-01 00:00 UTC", "command": COMMAND, "reproduce": reproduce,
            "benchmarks": [{"benchmark": b, "benchmark_version": "abc123def456", "stimulus_hash": "abc123def456" + "0" * 52,
                            "image_list_hash": "feed" * 16, "images": 80, "design": "d", "experiment": "e",
                            "trials": 80, "observer": f"{model}:pypi", "weights": f"{model} (sha256 feedbeef)",
                            "decision_rule": ["16class-mean"]} for b in ("cue-conflict", "dist")],
            "metrics": [metric("cue-conflict", "shape_bias", shape_bias, 0.958, "geirhos2019_shape_bias"),
                        metric("dist", "dist_accuracy", dist, 0.855, "dist_fig5")]}


def test_leaderboard_sorts_by_every_column_keeps_notes_and_gives_each_model_its_own_provenance(
        tmp_path, browser, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cards = tmp_path / "cards"
    cards.mkdir()
    for name, bias, dist in (("alpha", 0.30, 0.70), ("resnet50.a1", 0.60, 0.50), ("resnet50_a1", 0.45, 0.60)):
        (cards / f"{name}.json").write_text(json.dumps(scorecard(name, bias, dist)))
    (cards / "compare.json").write_text("[]")   # not a scorecard: left out
    assert main(["leaderboard", "cards", "--out", "site"]) == 0
    index = tmp_path / "site" / "index.html"
    pages = sorted(p.name for p in (tmp_path / "site" / "provenance").iterdir())
    assert len(pages) == 3 and "resnet50_a1.html" in pages   # resnet50.a1 gets a page of its own

    page = browser.new_page(viewport={"width": 1300, "height": 700})
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(index.as_uri())
    rows = page.locator("#leaderboard tbody tr")
    assert rows.count() == 3 and page.locator("svg.errorbar").count() == 6
    assert page.locator("svg.errorbar line.ci").count() == 6 and page.locator("svg.errorbar line.human").count() == 6
    assert page.locator("#leaderboard small.note").count() == 6
    assert "too small to rank: resnet50.a1 spans ranks 1-4 of 6" in page.locator("#leaderboard").inner_text()
    order = lambda: [rows.nth(i).get_attribute("data-model") for i in range(rows.count())]  # noqa: E731
    assert order() == ["alpha", "resnet50.a1", "resnet50_a1"]
    headers = page.locator("#leaderboard thead th")
    assert headers.count() == 4 and page.locator("#leaderboard thead a").count() == 0
    for i in range(headers.count()):                  # every header sorts, none follows a link
        headers.nth(i).click()
        assert page.url == index.as_uri() and headers.nth(i).get_attribute("aria-sort") == "descending", i
        if i == 1:
            assert order() == ["resnet50.a1", "resnet50_a1", "alpha"]   # shape bias, high to low
        if i == 2:
            assert order() == ["alpha", "resnet50_a1", "resnet50.a1"]   # DiST accuracy, high to low
    headers.nth(1).click()
    headers.nth(1).click()                            # a second click: low to high
    assert headers.nth(1).get_attribute("aria-sort") == "ascending" and order() == ["alpha", "resnet50_a1", "resnet50.a1"]
    page.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=True)

    texts = {}
    for model in ("resnet50.a1", "resnet50_a1"):
        page.goto(index.as_uri())
        page.locator(f"tr[data-model='{model}'] a.provenance").click()
        texts[model] = page.locator("body").inner_text()
        assert f"Provenance: {model}" in texts[model]
        assert (f"cuebench benchmark {model} --benchmarks cue-conflict,dist --per-class 2 --eed-steps 64 "
                "--device cpu") == page.locator("pre.reproduce").inner_text()
        for field in ("0.1.0", "0123456789abcdef" * 2 + "01234567", "abc123def456" + "0" * 52, "feed" * 16,
                      "16class-mean", f"{model} (sha256 feedbeef)"):
            assert field in texts[model]
    assert page.url.endswith("provenance/resnet50_a1.html")
    page.goto(index.as_uri())
    page.locator("p.benchmarks a[href='benchmarks/dist.html']").click()
    assert page.locator("svg.figure circle").count() == 3
    assert "Wen, Li, Jing & Lee" in page.locator("ul.references").inner_text()
    page.screenshot(path=str(tmp_path / "leaderboard_dist.png"), full_page=True)
    assert not errors


def test_two_scorecards_of_one_model_keep_their_own_provenance_pages(tmp_path):
    """A model scored twice with other options (a --per-class subset, then the full sets) is two rows; each links
    to the page with its own reproduce line, and says which run it is, instead of both showing the last one."""
    from cuebench_app.leaderboard import write_site

    subset = scorecard("alpha", 0.30, 0.70)
    for metric in subset["metrics"]:   # a subset: not compared with people
        metric.update(comparable=False, human=None, rank=None, rank_range=None, notes=["Not ranked: a subset."])
        metric["sources"][0].update(ranked=False, rank=None, not_ranked_because="this run scored a subset")
    full = {**scorecard("alpha", 0.24, 0.75), "command": {**COMMAND, "per_class": None},
            "reproduce": "cuebench benchmark alpha --benchmarks cue-conflict,dist --eed-steps 64 --device cpu"}
    other = scorecard("alpha.1", 0.5, 0.5)   # a model whose name looks like a numbered page
    index = write_site([subset, full, other], tmp_path / "site").read_text()
    links = [part.split("'")[0] for part in index.split("class='provenance' href='")[1:]]
    assert len(set(links)) == 3
    for card, link in zip((subset, full, other), links):
        page = (tmp_path / "site" / link).read_text()
        assert f"<pre class='reproduce'>{card['reproduce']}</pre>" in page and f"Provenance: {card['model']}" in page
    assert "<small class='options'>--benchmarks cue-conflict,dist --per-class 2 --eed-steps 64 --device cpu</small>" in index
    assert "<small class='options'>--benchmarks cue-conflict,dist --eed-steps 64 --device cpu</small>" in index
    # the benchmark page's figure ticks the people on the two comparable rows only, not across the subset's
    figure = (tmp_path / "site" / "benchmarks" / "cue-conflict.html").read_text().split('<svg class="figure"')[1]
    assert figure.count("<circle") == 3 and figure.count('class="human"') == 2
    # the published sources apart: the one measured as the runs were ranks them, the other is context only
    sources = (tmp_path / "site" / "benchmarks" / "cue-conflict.html").read_text().split("<table class='sources'>")[1]
    rows = sources.split("</table>")[0].split("<tr>")[2:]
    assert [row.split("</td>")[0] for row in rows] == ["<td>Source A", "<td>Source B"]
    assert "<td>80</td><td>feedfeedfeed</td><td>16class-mean</td><td>5</td><td>alpha, alpha.1</td>" in rows[0]
    assert "<li><b>alpha</b>: this run scored a subset</li>" in rows[0]
    assert ("<td>not stated</td><td>–</td><td>not stated</td><td>43</td><td>–</td>" in rows[1]
            and rows[1].count("the paper states neither") == 3)


def test_options_of_the_re_run_are_refused_where_nothing_runs(tmp_path, monkeypatch, capsys):
    """--cache, --shared, --device and --batch-size act only in `leaderboard verify`, and --out only in building a
    site: given where they would do nothing, each is refused with the reason, and nothing is written; a file named
    on the command line that is not a scorecard is refused, not skipped."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "alpha.json").write_text(json.dumps(scorecard("alpha", 0.3, 0.7)))
    assert main(["leaderboard", "alpha.json", "--device", "cpu", "--batch-size", "8"]) == 2
    assert ("--device, --batch-size: only `cuebench leaderboard verify SCORECARD` uses them"
            in capsys.readouterr().err)
    assert main(["leaderboard", "verify", "alpha.json", "--out", "elsewhere"]) == 2
    assert "--out builds a site; `leaderboard verify` writes nothing" in capsys.readouterr().err
    (tmp_path / "compare.json").write_text("[]")   # named on its own, not found in a folder of scorecards
    assert main(["leaderboard", "alpha.json", "compare.json"]) == 2
    assert "compare.json: not a scorecard (JSON with model, metrics, benchmarks)" in capsys.readouterr().err
    assert not (tmp_path / "site").exists() and not (tmp_path / "elsewhere").exists()

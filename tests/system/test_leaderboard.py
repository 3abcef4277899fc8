"""``cuebench leaderboard``: the static site lists every model with error bars, sorts by a column in a real
browser, and links each row to its provenance and each benchmark to its page with figure and references."""

from __future__ import annotations

import json
from cuebench_app.cli import main

def scorecard(model: str, shape_bias: float, dist: float) -> dict:
    """A scorecard as ``cuebench benchmark`` writes it (two benchmarks, one metric each)."""
    def metric(bench, name, value, human, ref):
        return {"benchmark": bench, "metric": name, "description": f"{name} description", "value": value,
                "ci_low": value - 0.05, "ci_high": value + 0.04, "trials": 80, "human": human, "human_label": "",
                "human_range": None, "noise_ceiling": None,
                "references": [{"id": ref, "label": "x", "version": 1}], "published_models": 5, "rank": 2,
                "rank_range": [1, 3], "notes": [f"{model} note"], "benchmark_version": "abc123def456",
                "observer": f"{model}:pypi"}
    return {"model": model, "package_version": "0.1.0", "created": "2026-01-01 00:00 UTC",
            "benchmarks": [{"benchmark": b, "benchmark_version": "abc123def456", "stimulus_hash": "abc123def456" + "0" * 52,
                            "design": "d", "experiment": "e", "trials": 80, "observer": f"{model}:pypi",
                            "weights": f"{model} (sha256 feedbeef)", "decision_rule": ["16class-mean"]}
                           for b in ("cue-conflict", "dist")],
            "metrics": [metric("cue-conflict", "shape_bias", shape_bias, 0.958, "geirhos2019_shape_bias"),
                        metric("dist", "dist_accuracy", dist, 0.855, "dist_fig5")]}


def test_leaderboard_lists_two_models_with_error_bars_sorts_and_links_provenance(tmp_path, browser, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "alpha.json").write_text(json.dumps(scorecard("alpha", 0.30, 0.70)))
    (cards / "beta.json").write_text(json.dumps(scorecard("beta", 0.60, 0.50)))
    (cards / "compare.json").write_text("[]")   # not a scorecard: left out
    assert main(["leaderboard", "cards", "--out", "site"]) == 0
    index = tmp_path / "site" / "index.html"

    page = browser.new_page(viewport={"width": 1100, "height": 500})
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(index.as_uri())
    rows = page.locator("#leaderboard tbody tr")
    assert rows.count() == 2 and page.locator("svg.errorbar").count() == 4
    assert page.locator("svg.errorbar line.ci").count() == 4 and page.locator("svg.errorbar line.human").count() == 4
    order = lambda: [rows.nth(i).get_attribute("data-model") for i in range(rows.count())]  # noqa: E731
    assert order() == ["alpha", "beta"]
    page.locator("th[data-col='1']").click()          # shape bias, high to low
    assert order() == ["beta", "alpha"]
    assert page.locator("th[data-col='1']").get_attribute("aria-sort") == "descending"
    page.locator("th[data-col='2']").click()          # DiST accuracy, high to low
    assert order() == ["alpha", "beta"]
    page.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=True)

    page.locator("tr[data-model='beta'] a.provenance").click()
    assert page.url.endswith("provenance/beta.html")
    text = page.locator("#provenance").inner_text()
    for field in ("0.1.0", "abc123def456", "abc123def456" + "0" * 52, "16class-mean", "beta (sha256 feedbeef)"):
        assert field in text
    page.goto(index.as_uri())
    page.locator("th a[href='benchmarks/dist.html']").click()
    assert page.locator("svg.figure circle").count() == 2
    assert "Wen, Li, Jing & Lee" in page.locator("ul.references").inner_text()
    page.screenshot(path=str(tmp_path / "leaderboard_dist.png"), full_page=True)
    assert not errors

"""Tables as the HTML reports show them (shared by the experiment report and the factor-study report)."""

from __future__ import annotations

import pandas as pd


def html_table(table: pd.DataFrame, max_rows: int = 200, p_values: bool = False) -> str:
    """A DataFrame as an HTML table, numbers to 3 decimals (p-values to 3 significant digits);
    long tables are cut (the CSV has all rows)."""
    shown = table.head(max_rows)
    formatters = {c: (lambda v: "" if pd.isna(v) else f"{v:.3g}") for c in shown.columns[int(p_values):]
                  if p_values or c == "p" or c.startswith("p_") or c.endswith("_p")}
    html = shown.to_html(index=False, float_format=lambda v: f"{v:.3f}", formatters=formatters, na_rep="",
                         classes="data", border=0)
    if len(table) > max_rows:
        html += f"<p class='note'>first {max_rows} of {len(table)} rows; all rows are in the CSV.</p>"
    return html


def level_parameters(scored: pd.DataFrame) -> pd.DataFrame:
    """``condition, level, parameters``: each level named by its parameter values (``grid 3``; ``d 12,
    sigma_color 170``), the parameters that vary over the condition's levels, or all of them for a single
    level, so a table names a level as its figure's axis does, not by its position on the grid."""
    from .load import params_of

    levels = scored.assign(level=scored["level"].fillna(-1).astype(int)).drop_duplicates(["condition", "level"])
    rows = []
    for condition, group in levels.groupby("condition", sort=False):
        params = [params_of(p) for p in group["params"]]
        keys = [k for k in dict.fromkeys(k for p in params for k in p) if len({str(p.get(k)) for p in params}) > 1]
        shown = keys or list(dict.fromkeys(k for p in params for k in p))
        for level, p in zip(group["level"], params):
            named = ", ".join(f"{k} {p[k]:g}" if isinstance(p.get(k), (int, float)) else f"{k} {p.get(k)}"
                              for k in shown if k in p)
            rows.append({"condition": condition, "level": int(level), "parameters": named})
    return pd.DataFrame(rows, columns=["condition", "level", "parameters"])


def with_parameters(table: pd.DataFrame, names: pd.DataFrame) -> pd.DataFrame:
    """``table`` with a ``parameters`` column right after ``level`` (:func:`level_parameters`)."""
    if table.empty or "level" not in table or "condition" not in table:
        return table
    keyed = {"condition": object}  # an empty or all-missing side must not change the key's type (no names: NaN)
    out = table.drop(columns="parameters", errors="ignore").astype(keyed).merge(
        names.astype(keyed), on=["condition", "level"], how="left")
    columns = [c for c in table.columns if c != "parameters"]
    at = columns.index("level") + 1
    return out[columns[:at] + ["parameters"] + columns[at:]]

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

"""Analysis of the response table: loading, exclusions, metrics, statistics, plots and reports.

Never imports torch: analysis runs anywhere the responses are.
"""

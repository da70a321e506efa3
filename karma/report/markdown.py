"""Markdown pages and tables of the pipeline's results (pandas DataFrames), without the models or torch, which
most table jobs do not need."""

from __future__ import annotations

import pandas as pd


def to_markdown(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    return df.to_markdown(index=False, floatfmt=floatfmt)


def markdown_report(title: str, intro: list[str], table: pd.DataFrame) -> str:
    """A titled Markdown page: intro lines, the table, its source (a column of its own when rows differ)."""
    sources = list(dict.fromkeys(table.source)) if "source" in table else []
    if len(sources) > 1:
        return "\n".join([f"# {title}", "", *intro, "", to_markdown(table)]) + "\n"
    body = to_markdown(table.drop(columns=["source"], errors="ignore"))
    return "\n".join([f"# {title}", "", *intro, "", body, "", f"Source: {sources[0] if sources else ''}"]) + "\n"

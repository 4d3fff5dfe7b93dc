"""Plain-text tables for the operator commands (`make status`, `make plan`)."""

from __future__ import annotations


def aligned(rows: list[list[str]], indent: str = "  ") -> list[str]:
    """The rows as lines, each column padded to its widest cell (the first row is usually the heading)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows]

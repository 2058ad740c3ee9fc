"""Sweeps: one recipe trained over a grid of settings and seeds, compared on validation, reported with CIs."""

from retrieval.sweep.grid import Cell, parse_grid, plan_cells
from retrieval.sweep.report import CellSummary, summarize, write_reports
from retrieval.sweep.runner import cell_command, run_cells

__all__ = ["Cell", "CellSummary", "cell_command", "parse_grid", "plan_cells", "run_cells", "summarize", "write_reports"]

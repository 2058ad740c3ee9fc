"""Pictures of a run: training curves and diagnostics, classification plots and query grids."""

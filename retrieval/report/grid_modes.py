"""The query grid's `--grid-queries` values, torch-free so the command line's parser can offer them."""

__all__ = ["GRID_MODES"]

GRID_MODES = ("worst", "random")  # the worst-ranked queries first, or a seeded random sample

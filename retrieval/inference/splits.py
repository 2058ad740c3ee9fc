"""The `--split` values of `embed` and `index`: which rows of a CSV or dataset are read.

Kept apart from `retrieval.inference.sources` (which imports the torch dataset readers) so the
command line's parsers can offer them without importing torch.
"""

__all__ = ["SPLITS"]

# `gallery`: test rows with is_gallery=1 (all test rows when the CSV has no is_gallery column):
# the images a benchmark's queries search.
SPLITS = ("all", "train", "val", "test", "gallery")

"""The names of a dataset's splits and the `--split` values that pick rows of them: one spelling for every reader.

Plain tables with no imports: the CSV reader (`retrieval.data.csv_dataset`) checks a `split` cell
against them, and the command line's parsers offer them without loading the dataset readers (a
`retrieval serve` process, which parses every command's flags, loads no `retrieval.data`).
"""

__all__ = ["SPLITS", "SPLIT_NAMES"]

# What a CSV's `split` column holds, in the order the splits are read.
SPLIT_NAMES = ("train", "val", "test")
# The `--split` values of `embed`, `index` and `pretrain`: `all` rows, one split's, or `gallery`: test rows with
# is_gallery=1 (all test rows when the CSV has no is_gallery column), the images a benchmark's queries search.
SPLITS = ("all", *SPLIT_NAMES, "gallery")

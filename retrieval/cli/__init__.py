"""The `retrieval` command line: thin wrappers that parse a config and call the library.

A command module imports at its top only what its parser needs (the standard library and torch-free
vocabulary such as `retrieval.choices.splits`); the library (torch, timm, FAISS, the web stack)
is imported inside the functions that run the command, so `--help`, `--version` and a mistyped
argument answer at once (`tests/cli/test_import_budget.py` holds them to that).
"""

"""The `retrieval` command line: thin wrappers that parse a config and call the library."""

"""The named choices of the run configuration and the command line, as plain tables: augmentation presets, dataset
traits, split names.

They sit below `retrieval.config`, which validates a config against them, and below the registries that
attach code to the same names (`retrieval.data.registry`: each dataset's readers), so the config
validates itself without importing the dataset readers or torch, and neither imports the other.
"""

__all__: list[str] = []

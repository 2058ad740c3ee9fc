"""The named choices of the run configuration, as plain tables: augmentation presets and dataset traits.

They sit below `retrieval.config`, which validates a config against them, and below the registries that
attach code to the same names (`retrieval.data.registry`: each dataset's readers), so the config
validates itself without importing the dataset readers or torch, and neither imports the other.
"""

__all__: list[str] = []

"""The named choices of the run configuration and the command line, torch-free: augmentation presets, split
names, and the registries whose names the config checks (losses, datasets, pretraining methods, trackers).

They sit below `retrieval.config`, which validates a config against them; a registry names its
built-ins' code as `module:attr` strings, imported on first use, so the config validates itself
without importing the dataset readers, the losses or torch.
"""

__all__: list[str] = []

"""Inference: images to embeddings with a trained checkpoint, the images to read, and embeddings files."""

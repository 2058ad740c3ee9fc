"""Embedding models: a timm backbone with pooling and a normalized linear head."""

from retrieval.models.embedder import Embedder, create_backbone
from retrieval.models.pooling import GlobalPool

__all__ = ["Embedder", "GlobalPool", "create_backbone"]

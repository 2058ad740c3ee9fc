"""retrieval: deep metric learning for image retrieval.

Train a timm embedder with proxy or pair losses, measure Recall@K / MAP@R with exact FAISS
search, and turn the model into a searchable index.
"""

__version__ = "0.1.0"

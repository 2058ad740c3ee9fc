"""`retrieval reranker`: a learned pairwise re-ranker of a checkpoint's results, trained on its own data.

`mining.py` mines the training pairs, `training.py` trains the pair model, `onnx.py` exports it, `build.py`
runs it all from a `RerankerRequest` and writes the re-ranker directory. Applying one is torch-free
(`retrieval.core.learned_rerank`, `retrieval.export.reranker_onnx`) or, in evaluation, PyTorch
(`retrieval.evaluate.learned_rerank`).
"""

"""Training and evaluation loops, checkpoints and run plots."""

from retrieval.engine.checkpoint import load_checkpoint, save_checkpoint
from retrieval.engine.evaluate import embed_dataset, evaluate_model, format_metrics
from retrieval.engine.trainer import Trainer

__all__ = ["Trainer", "embed_dataset", "evaluate_model", "format_metrics", "load_checkpoint", "save_checkpoint"]

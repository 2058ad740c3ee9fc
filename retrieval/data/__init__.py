"""Datasets, transforms and samplers."""

from retrieval.data.csv_dataset import CsvSplit, ImageDataset, load_image, read_csv_split, read_csv_splits
from retrieval.data.datasets import DATASETS, EvalSplit, RetrievalData, build_data
from retrieval.data.digits import DigitsDataset, load_digits_split
from retrieval.data.pk_sampler import PKSampler
from retrieval.data.validation import holdout_classes, holdout_images

__all__ = [
    "DATASETS",
    "CsvSplit",
    "DigitsDataset",
    "EvalSplit",
    "ImageDataset",
    "PKSampler",
    "RetrievalData",
    "build_data",
    "holdout_classes",
    "holdout_images",
    "load_image",
    "load_digits_split",
    "read_csv_split",
    "read_csv_splits",
]

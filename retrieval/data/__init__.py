"""Datasets, transforms and samplers."""

from retrieval.data.csv_dataset import CsvSplit, ImageDataset, load_image, read_csv_split
from retrieval.data.datasets import DATASETS, RetrievalData, build_data
from retrieval.data.digits import DigitsDataset, load_digits_split
from retrieval.data.pk_sampler import PKSampler

__all__ = [
    "DATASETS",
    "CsvSplit",
    "DigitsDataset",
    "ImageDataset",
    "PKSampler",
    "RetrievalData",
    "build_data",
    "load_image",
    "load_digits_split",
    "read_csv_split",
]

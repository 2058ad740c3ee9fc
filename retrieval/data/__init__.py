"""Datasets, transforms and samplers; `registry.DATASETS` names every dataset `data.name` can be."""

from retrieval.data.csv_dataset import CsvSplit, labeled_split, read_csv_split, read_csv_splits
from retrieval.data.datasets import EvalSplit, RetrievalData, build_data, read_splits
from retrieval.data.digits import DigitsDataset, load_digits_split
from retrieval.data.folder import list_images, read_folder
from retrieval.data.holdout import holdout_classes, holdout_images
from retrieval.data.image_dataset import ImageDataset
from retrieval.data.image_loader import BAD_IMAGE_POLICIES, BadImage, ImageLoader
from retrieval.data.official import read_cars196, read_cub200, read_inshop, read_sop
from retrieval.data.pk_sampler import PKSampler
from retrieval.data.registry import DATASETS, DatasetSpec, dataset_spec
from retrieval.images import flatten_image, load_image

__all__ = [
    "BAD_IMAGE_POLICIES",
    "DATASETS",
    "BadImage",
    "CsvSplit",
    "DatasetSpec",
    "DigitsDataset",
    "EvalSplit",
    "ImageDataset",
    "ImageLoader",
    "PKSampler",
    "RetrievalData",
    "build_data",
    "dataset_spec",
    "flatten_image",
    "holdout_classes",
    "holdout_images",
    "labeled_split",
    "list_images",
    "load_digits_split",
    "load_image",
    "read_cars196",
    "read_csv_split",
    "read_csv_splits",
    "read_cub200",
    "read_folder",
    "read_inshop",
    "read_sop",
    "read_splits",
]

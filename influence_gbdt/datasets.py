"""The UCI Adult data set (the paper's main data set), shipped compressed with the package.

Source: Dua and Graff (2019), UCI Machine Learning Repository, "Adult" (Becker and Kohavi, 1996),
CC BY 4.0. 32,561 training and 16,281 test rows, 14 features, target income > 50K.
"""

from __future__ import annotations

from importlib import resources

import numpy as np
import pandas as pd

ADULT_COLUMNS: tuple[str, ...] = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
)
ADULT_CATEGORICAL: tuple[str, ...] = (
    "workclass", "education", "marital-status", "occupation", "relationship", "race", "sex",
    "native-country",
)


def load_adult(split: str = "train") -> tuple[pd.DataFrame, np.ndarray]:
    """Load the shipped UCI Adult data.

    Parameters
    ----------
    split : {"train", "test"}

    Returns
    -------
    X : DataFrame of shape (32561 or 16281, 14)
        Numeric columns as int64, categorical columns as str ("?" marks a missing value).
    y : ndarray of shape (n,), int64
        1 where income > 50K, else 0.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    name = "adult.data.csv.gz" if split == "train" else "adult.test.csv.gz"
    with resources.files("influence_gbdt").joinpath("data", name).open("rb") as fh:
        frame = pd.read_csv(fh, header=None, names=[*ADULT_COLUMNS, "income"], compression="gzip")
    y = frame.pop("income").str.rstrip(".").eq(">50K").to_numpy(dtype=np.int64)
    for col in ADULT_CATEGORICAL:
        frame[col] = frame[col].astype(str)
    return frame, y

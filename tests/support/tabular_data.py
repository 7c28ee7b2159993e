"""Real tabular data shipped by packages (no downloads): palmerpenguins and vega_datasets' cars,
as raw feature rows of the wire format (``None`` for a missing value)."""

from __future__ import annotations

import math
import warnings
from typing import Any


def _raw(value: Any) -> Any:
    """A pandas cell as a wire-format value: NaN/None missing, numpy scalars as Python ones."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def penguins() -> tuple[tuple[str, ...], list[list[Any]]]:
    """palmerpenguins: species, island and sex strings; NaNs in every measurement and sex."""
    from palmerpenguins import load_penguins

    frame = load_penguins()
    names = tuple(str(c) for c in frame.columns)
    return names, [[_raw(v) for v in row] for row in frame.itertuples(index=False)]


def cars() -> tuple[tuple[str, ...], list[list[Any]]]:
    """vega_datasets' local cars: the Origin and Name strings, NaN Horsepower and
    Miles_per_Gallon; the model year as a number."""
    from vega_datasets import data

    with warnings.catch_warnings():  # its read_json(convert_dates=...) is deprecated in pandas 3
        warnings.simplefilter("ignore")
        frame = data.cars()
    frame["Year"] = frame["Year"].dt.year
    names = tuple(str(c) for c in frame.columns)
    return names, [[_raw(v) for v in row] for row in frame.itertuples(index=False)]


def wire_rows(names: tuple[str, ...], rows: list[list[Any]]) -> list[dict[str, Any]]:
    """Calibration rows in object form (a missing value left out, as an absent key), with a
    constant prediction and the row number as the label."""
    return [{"features": {n: v for n, v in zip(names, row, strict=True) if v is not None},
             "prediction": 0.0, "label": float(i)} for i, row in enumerate(rows)]

"""Trajectories as Hugging Face datasets: export a store's rollouts (or GRPO samples) to `datasets` / parquet,
and import such a file back into a store. The columns are described in `schema.py` and docs/datasets.md.

`datasets` (and `pyarrow`) are the optional extra `datasets`, imported only by the functions that need them.
"""

from __future__ import annotations

from .importing import ImportReport, check_rows, import_rows
from .rows import rows_from_samples, rows_from_store
from .schema import COLUMNS, exportable_rows, read_parquet, to_dataset, write_parquet

__all__ = [
    "COLUMNS",
    "rows_from_samples",
    "rows_from_store",
    "import_rows",
    "check_rows",
    "ImportReport",
    "exportable_rows",
    "to_dataset",
    "write_parquet",
    "read_parquet",
]

"""Rows of a parquet file as JSON lines: ``python -m cuda_agent_bridge.rows FILE``.

The C importer (``cuda-agent tasks import ops6k FILE.parquet``, src/task/import.c) runs this and
reads stdout: one JSON object per row, in file order, with the columns ``code``, ``ops`` and
``data_source`` (a missing optional column is null). A row that cannot be passed on (code too
large, a line over the C side's cap) becomes ``{"_skip": "reason"}`` so that row numbers stay
aligned. Nothing else is written to stdout.

Exit status: 0 done; 2 the file cannot be read as parquet or has no ``code`` column; 3 pyarrow is
missing. On failure one line on stderr says why.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from typing import IO, Any

COLUMNS = ("code", "ops", "data_source")
MAX_CODE_BYTES = 1 << 20  # CA_IMPORT_MAX_CODE
MAX_LINE_BYTES = 4 << 20  # CA_IMPORT_MAX_LINE
BATCH_ROWS = 256
EXIT_BAD_FILE = 2
EXIT_NO_PYARROW = 3
NO_PYARROW = "parquet needs pyarrow: pip install pyarrow, or convert to JSONL"


class RowsError(Exception):
    """The file cannot be read; the message is one line."""


def _plain(value: Any) -> Any:
    """A JSON-ready form of one cell: bytes decoded, lists and dicts kept, other types as text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None  # a missing cell read as NaN; JSON has no NaN
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def row_line(row: dict[str, Any]) -> str:
    """One output line (without newline) for one row."""
    cells = {name: _plain(row.get(name)) for name in COLUMNS}
    code = cells["code"]
    if isinstance(code, str) and len(code.encode("utf-8", errors="replace")) > MAX_CODE_BYTES:
        return json.dumps({"_skip": f"code is over the limit of {MAX_CODE_BYTES} bytes"})
    line = json.dumps(cells, ensure_ascii=False)
    if len(line.encode("utf-8", errors="replace")) > MAX_LINE_BYTES:
        return json.dumps({"_skip": f"the row is over the limit of {MAX_LINE_BYTES} bytes"})
    return line


def iter_rows(path: str) -> Iterator[dict[str, Any]]:
    """The rows of a parquet file, a batch at a time (pyarrow imported here)."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only this path needs pyarrow

    try:
        pf = pq.ParquetFile(path)
    except (OSError, ValueError) as e:
        raise RowsError(f"{path}: not a readable parquet file: {_one_line(e)}") from e
    names = set(pf.schema_arrow.names)
    if "code" not in names:
        shown = ", ".join(sorted(names)[:20])
        raise RowsError(f"{path} has no 'code' column (columns: {shown})")
    wanted = [c for c in COLUMNS if c in names]
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=wanted):
            yield from batch.to_pylist()
    except (OSError, ValueError) as e:
        raise RowsError(f"{path}: cannot read the rows: {_one_line(e)}") from e


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


def write_rows(path: str, out: IO[str]) -> int:
    """Writes every row of path to out; returns the number of rows."""
    n = 0
    for row in iter_rows(path):
        out.write(row_line(row))
        out.write("\n")
        n += 1
    out.flush()
    return n


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m cuda_agent_bridge.rows FILE.parquet", file=sys.stderr)
        return EXIT_BAD_FILE
    try:
        import pyarrow.parquet  # noqa: F401, PLC0415 - probe: a clear message when missing
    except ImportError:
        print(NO_PYARROW, file=sys.stderr)
        return EXIT_NO_PYARROW
    try:
        write_rows(args[0], sys.stdout)
    except RowsError as e:
        print(str(e), file=sys.stderr)
        return EXIT_BAD_FILE
    except BrokenPipeError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

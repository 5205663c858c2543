"""verl's multi-turn SFT dataset for `cuda-agent rft` parquet files (recipe stage 2: verl 0.9.1,
`data.custom_cls.path/name` = this file / RftSFTDataset).

rft writes the `tools` column as JSON text (a parquet list of structs would give every tool
every other tool's parameters as nulls, and the chat template would show them: docs/rl.md);
this subclass of verl's MultiTurnSFTDataset decodes it back to the list of tool schemas as it
reads the file, so the template renders each row's tools as they were.
"""

from __future__ import annotations

import json
from typing import Any

from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset


def decode_tools(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


class RftSFTDataset(MultiTurnSFTDataset):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tools: list[Any] | None = getattr(self, "tools", None)
        if tools is not None:
            setattr(self, "tools", [decode_tools(t) for t in tools])  # noqa: B010 (verl's Any)

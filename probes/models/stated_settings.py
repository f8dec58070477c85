"""StatedSetting: one training setting a running job states (a dimension of its model, its sequence length,
micro-batch, gradient accumulation, dtype, compile), with where it was read, or why it could not be.

`gputop probe --like PID` times the reference step at these. Its own module, below the readers that make them
(probes/models/nanogpt_config.py, hf_command_line.py), the module that asks them in turn
(probes/jobs/job_command_line.py) and the probe that resolves them against the user's flags
(probes/reference/like_job.py). Nothing here is guessed: a setting the job does not state is `value` None, its
`source` the reason, and the probe asks the user for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# What a setting sets in the probe: a field of nanoGPT's GPT shape, the config.json of another family ("model"),
# or one of the probe's options. A closed vocabulary: the probe's flag for each is in probes/reference/like_job.py.
SettingName = Literal["n_layer", "n_head", "n_embd", "vocab_size", "bias", "model", "block_size", "batch_size",
                      "grad_accum", "dtype", "compile"]
DTYPE_VALUES = ("auto", "bf16", "fp16", "fp32")  # a dtype setting's value: the probe's --dtype choices


@dataclass(frozen=True)
class StatedSetting:
    """One setting: its value as the probe takes it (an int, a bool, a dtype of DTYPE_VALUES, a config.json's
    path), and where it was read ("config/h200_xl.py: batch_size = 16"); `value` None when it was not read, and
    `source` then says why."""

    name: SettingName
    value: int | bool | str | None
    source: str

    @property
    def read(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class StatedSettings:
    """Every setting one reader found on a job's command line (and in its files), in the probe's order."""

    reader: str  # how the job was read: "nanoGPT's train.py", "a Hugging Face config.json"
    settings: tuple[StatedSetting, ...]

    def get(self, name: SettingName) -> StatedSetting | None:
        return next((setting for setting in self.settings if setting.name == name), None)

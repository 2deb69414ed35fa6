"""The base of every section of the settings tree: unknown keys are errors, and so is a bad value assigned later."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

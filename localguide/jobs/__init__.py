"""Batch jobs: a JSONL file of items through ``Model.batch``, resumable (``localguide batch``)."""

from .jsonl import Entry, JobError, Output, id_key, read_input

__all__ = ["Entry", "JobError", "Output", "id_key", "read_input"]
